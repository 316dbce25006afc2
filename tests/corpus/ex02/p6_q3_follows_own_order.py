# expect: q1=full q2=full q3=full
# why: q1 lists P6's cos before exp (allowed there), but q3 then numbers the steps by that guessed order (exp freed after 3) instead of the order backward really runs; every other program right
# prompt revised after this variant was written: q3 now accepts the steps of any valid order (the writer's reading, 'less', was right for the old prompt)

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_order = {
    "P1": ["SumBackward0", "MulBackward0", "ExpBackward0"],
    "P2": ["SumBackward0", "MulBackward0", "SinBackward0"],
    "P3": ["SumBackward0", "DivBackward0", "TanhBackward0"],
    "P4": ["SumBackward0", "ExpBackward0", "MulBackward0"],
    "P5": ["SumBackward0", "MulBackward0", "SigmoidBackward0"],
    "P6": ["SumBackward0", "AddBackward0", "CosBackward0", "ExpBackward0"],
    "P7": ["SumBackward0", "SigmoidBackward0", "MulBackward0"],
    "P8": ["SumBackward0", "MulBackward0", "SinBackward0"],
}

# %%
q2_reads = {
    "P1": {"SumBackward0": set(), "MulBackward0": {"self", "other"}, "ExpBackward0": {"result"}},
    "P2": {"SumBackward0": set(), "MulBackward0": {"other"}, "SinBackward0": {"self"}},
    "P3": {"SumBackward0": set(), "DivBackward0": {"self", "other"}, "TanhBackward0": {"result"}},
    "P4": {"SumBackward0": set(), "ExpBackward0": {"result"}, "MulBackward0": {"self", "other"}},
    "P5": {"SumBackward0": set(), "MulBackward0": {"self", "other"}, "SigmoidBackward0": {"result"}},
    "P6": {"SumBackward0": set(), "AddBackward0": set(), "ExpBackward0": {"result"}, "CosBackward0": {"self"}},
    "P7": {"SumBackward0": set(), "SigmoidBackward0": {"result"}, "MulBackward0": {"other"}},
    "P8": {"SumBackward0": set(), "MulBackward0": {"self"}, "SinBackward0": {"self"}},
}

# %%
q3_freed = {
    "P1": {"ExpBackward0.result": 2, "MulBackward0.self": 2, "MulBackward0.other": None},
    "P2": {"SinBackward0.self": None, "MulBackward0.other": None},
    "P3": {"TanhBackward0.result": 2, "DivBackward0.self": 2, "DivBackward0.other": None},
    "P4": {"MulBackward0.self": None, "MulBackward0.other": None, "ExpBackward0.result": 1},
    "P5": {"SigmoidBackward0.result": 2, "MulBackward0.self": 2, "MulBackward0.other": None},
    "P6": {"CosBackward0.self": None, "ExpBackward0.result": 3},
    "P7": {"MulBackward0.other": 2, "SigmoidBackward0.result": 1},
    "P8": {"SinBackward0.self": None, "MulBackward0.self": 1},
}

# %%
tk.check("ex02")
