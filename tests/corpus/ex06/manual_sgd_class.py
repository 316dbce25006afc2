# expect: q1=full
# why: a Trainer class with module-level run log (floats only); plain SGD written by hand (p -= 0.1 * grad, what SGD(lr=0.1) does), diagnostic via .data
# %%
import torch

import tracekit as tk

# %%
RUNS = []  # module-level: every run's history, floats only


class Trainer:
    lr = 0.1

    def __init__(self, model):
        self.model = model
        self.params = [p for p in model.parameters() if p.requires_grad]

    def step(self, x):
        for p in self.params:
            p.grad = None
        self.model(x).pow(2).mean().backward()
        with torch.no_grad():
            for p in self.params:
                if p.grad is not None:
                    p.sub_(p.grad, alpha=self.lr)

    def diagnostic(self, x_val):
        return self.model(x_val).pow(2).mean().data


def train(model, x, x_val, steps):
    t = Trainer(model)
    history = []
    for _ in range(steps):
        t.step(x)
        history.append(float(t.diagnostic(x_val)))
    RUNS.append(list(history))
    return history

# %%
tk.check("ex06")
