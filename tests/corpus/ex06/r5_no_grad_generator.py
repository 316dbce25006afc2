# expect: q1=full
# why: a generator trains one step and yields the diagnostic computed under torch.no_grad() as a float; train returns list(generator), so no diagnostic graph is ever recorded
# %%
import torch

import tracekit as tk

# %%
def _sgd_steps(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        with torch.no_grad():
            yield float(model(x_val).pow(2).mean())


def train(model, x, x_val, steps):
    return list(_sgd_steps(model, x, x_val, steps))

# %%
tk.check("ex06")
