# expect: q1=full q2=full
# why: q1 0-dim tensors as counts; q2 a factory closure keeping numpy copies (offloaded like the tutorial's disk store), released by weakref.finalize
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
import torch

q1_pack_calls = {k: torch.tensor(n) for k, n in
                 [("H1", 4), ("H2", 1), ("H3", 1), ("H4", 0), ("H5", 2), ("H6", 3), ("H7", 2), ("H8", 2), ("H9", 1), ("H10", 1)]}

# %%
def make_hooks():
    import weakref

    import torch

    arrays = {}
    state = {"n": 0}

    class Key:
        pass

    def pack(t):
        state["n"] += 1
        key = Key()
        arrays[state["n"]] = t.detach().cpu().numpy().copy()
        key.n = state["n"]
        weakref.finalize(key, arrays.pop, state["n"], None)
        return key

    def unpack(key):
        return torch.from_numpy(arrays[key.n])

    return pack, unpack


hooks = make_hooks()

# %%
tk.check("ex07")
