# expect: q1=full q2=full
# why: q1 counted by running each program under counting hooks in the notebook; q2 a Store class whose bound methods are the hooks, handles that release on __del__
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
import torch


def _count(program):
    calls = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: calls.append(1) or t, lambda t: t):
        program()
    return len(calls)


def _v(rg):
    return torch.randn(5, requires_grad=rg)


_x = torch.randn(2, 3)
q1_pack_calls = {
    "H1": _count(lambda: (lambda a: (a.sin() * a.cos()).sum())(_v(True))),
    "H2": _count(lambda: _v(True).exp().sum()),
    "H3": _count(lambda: (_v(True) * _v(False)).sum()),
    "H4": _count(lambda: (_v(True) + _v(True)).sum()),
    "H5": _count(lambda: _v(True).sigmoid().tanh().sum()),
    "H6": _count(lambda: (_v(True).exp() * _v(True)).sum()),
    "H7": _count(lambda: (_x @ torch.randn(3, 4, requires_grad=True)).relu().sum()),
    "H8": _count(lambda: (_v(False) / _v(True)).sum()),
    "H9": _count(lambda: _v(True).pow(3).sum()),
    "H10": _count(lambda: (_v(True).relu() * 2).sum()),
}

# %%
class Store:
    def __init__(self):
        self.items = {}
        self.next_key = 0

    class Handle:
        def __init__(self, store, key):
            self.store, self.key = store, key

        def __del__(self):
            self.store.items.pop(self.key, None)

    def pack(self, t):
        self.next_key += 1
        self.items[self.next_key] = t.detach()
        return Store.Handle(self, self.next_key)

    def unpack(self, handle):
        return self.items[handle.key]


store = Store()
hooks = (store.pack, store.unpack)

# %%
tk.check("ex07")
