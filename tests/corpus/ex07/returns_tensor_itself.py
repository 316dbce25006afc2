# expect: q1=full q2=full
# why: pack returns t.detach() (a tensor, which the prompt forbids), but the prompt says what pack returns is not judged; the memory is right
# ambiguous: 'returns a handle that is not a tensor' vs '(What pack returns is not judged ...)': forbidden but not gradable
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
def pack(t):
    return t.detach()


def unpack(handle):
    return handle


hooks = (pack, unpack)

# %%
tk.check("ex07")
