# expect: q1=full q2=less
# why: q1 right (numpy ints); q2 frees through a Ticket handle's __del__ but stores t itself, not t.detach(): for a saved output (exp/tanh/sigmoid save their result) store -> t -> t.grad_fn -> saved handle is a cycle through C++ that never breaks when a graph is dropped with its saved values still held, which the prompt warns against by name
# ambiguous: the cycle only leaks when a graph is dropped without a releasing backward; if every measured graph ends with a backward without retain_graph (saved values released, the ticket dies), memory passes and this scores full
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
import numpy as np

q1_pack_calls = {f"H{i}": np.int64(n) for i, n in enumerate([4, 1, 1, 0, 2, 3, 2, 2, 1, 1], start=1)}

# %%
import itertools

_vault = {}
_numbers = itertools.count()


class Ticket:
    def __init__(self, number):
        self.number = number

    def __del__(self):
        _vault.pop(self.number, None)


def pack(t):
    ticket = Ticket(next(_numbers))
    _vault[ticket.number] = t
    return ticket

def unpack(ticket):
    return _vault[ticket.number]

hooks = (pack, unpack)

# %%
tk.check("ex07")
