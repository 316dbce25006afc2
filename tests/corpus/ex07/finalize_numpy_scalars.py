# expect: q1=full q2=full
# why: q1 counts as numpy int64 in a dict built by zip; q2 int keys with weakref.finalize on a small handle object
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
import numpy as np

_ids = ["H1", "H2", "H3", "H4", "H5", "H6", "H7", "H8", "H9", "H10"]
q1_pack_calls = dict(zip(_ids, np.array([4, 1, 1, 0, 2, 3, 2, 2, 1, 1], dtype=np.int64)))

# %%
import weakref

STORE = {}
COUNTER = [0]


class Ticket:
    def __init__(self, key):
        self.key = key


def pack(t):
    COUNTER[0] += 1
    ticket = Ticket(COUNTER[0])
    STORE[ticket.key] = t.detach()
    weakref.finalize(ticket, STORE.pop, ticket.key, None)
    return ticket


def unpack(ticket):
    return STORE[ticket.key]


hooks = (pack, unpack)

# %%
tk.check("ex07")
