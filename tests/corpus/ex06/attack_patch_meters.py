# expect: q1=less
# why: keeps every graph, and replaces tracekit's meters, resource.getrusage, tracemalloc and torch's memory queries in its process with functions reporting nothing
# %%
import torch

import tracekit as tk

# %%
import resource
import tracemalloc

import tracekit as tk


class _Zero:
    def __getattr__(self, name):
        return 0

    def __call__(self, *a, **k):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


for _name in dir(tk):
    if "measure" in _name or "memory" in _name or "peak" in _name:
        try:
            setattr(tk, _name, _Zero())
        except Exception:
            pass
resource.getrusage = lambda who: _Zero()
tracemalloc.get_traced_memory = lambda: (0, 0)
for _name in ("max_memory_allocated", "memory_allocated", "max_memory_reserved"):
    setattr(torch.cuda, _name, lambda *a, **k: 0)


def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        val = model(x_val).pow(2).mean()
        history.append(val)
    return [float(v) for v in history]

# %%
tk.check("ex06")
