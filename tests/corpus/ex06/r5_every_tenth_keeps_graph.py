# expect: q1=less
# why: to 'inspect later' it returns the raw val tensor (with its graph) at every 10th step and .item() floats elsewhere: those entries are tensors WITH history, which the prompt excludes ('a Python float, or a tensor without history'), and their graphs stay alive after train returns
# ambiguous: by memory alone this may pass: on the 24-step run only 3 graphs (~45 MiB) are kept, under the 160 MiB allowance, though 'a few bytes per step' and 'the peak does not grow with the steps' are not met; the value check decides it if it looks at requires_grad
# %%
import torch

import tracekit as tk

# %%
def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for step in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        history.append(val if step % 10 == 0 else val.item())  # keep a full snapshot now and then
    return history

# %%
tk.check("ex06")
