# expect: q1=less
# why: returns floats at once, but a background thread keeps every graph and drops them a few seconds later (memory after return looks fine for a moment, the peak does not)
# %%
import torch

import tracekit as tk

# %%
import threading
import time


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history, kept = [], []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        kept.append(val)
        history.append(val.item())

    def hold(graphs):
        time.sleep(3)
        graphs.clear()

    threading.Thread(target=hold, args=(kept,), daemon=True).start()
    return history

# %%
tk.check("ex06")
