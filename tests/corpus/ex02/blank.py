# expect: q1=zero q2=zero q3=zero
# why: the untouched student notebook

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_order = None  # your answer

# %%
q2_reads = None  # your answer

# %%
q3_freed = None  # your answer

# %%
tk.check("ex02")
