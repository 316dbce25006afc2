# expect: q1=full
# why: a small DiagnosticLog class records val.detach() (a 0-dim tensor without history) through a helper; train returns the log's list of detached tensors; the graph of each val dies with val
# %%
import torch

import tracekit as tk

# %%
class DiagnosticLog:
    """Keeps one history-free number per step."""

    def __init__(self):
        self.values = []

    def record(self, value):
        self.values.append(value.detach())

    def __len__(self):
        return len(self.values)


def diagnostic(model, x_val):
    return model(x_val).pow(2).mean()


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    log = DiagnosticLog()
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        log.record(diagnostic(model, x_val))
    return log.values

# %%
tk.check("ex06")
