# expect: q1=zero q2=full q3=less
# why: lists the rules in forward (execution) order, not backward's; q2 right (sets, order-free); q3 indexes steps by that forward order (right only where it happens to coincide: P2, P4, P8)

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_order = {
    "P1": ["ExpBackward0", "MulBackward0", "SumBackward0"],
    "P2": ["SinBackward0", "MulBackward0", "SumBackward0"],
    "P3": ["TanhBackward0", "DivBackward0", "SumBackward0"],
    "P4": ["MulBackward0", "ExpBackward0", "SumBackward0"],
    "P5": ["SigmoidBackward0", "MulBackward0", "SumBackward0"],
    "P6": ["CosBackward0", "ExpBackward0", "AddBackward0", "SumBackward0"],
    "P7": ["MulBackward0", "SigmoidBackward0", "SumBackward0"],
    "P8": ["SinBackward0", "MulBackward0", "SumBackward0"],
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
    "P1": {"ExpBackward0.result": 1, "MulBackward0.self": 1, "MulBackward0.other": None},
    "P2": {"SinBackward0.self": None, "MulBackward0.other": None},
    "P3": {"TanhBackward0.result": 1, "DivBackward0.self": 1, "DivBackward0.other": None},
    "P4": {"MulBackward0.self": None, "MulBackward0.other": None, "ExpBackward0.result": 1},
    "P5": {"SigmoidBackward0.result": 1, "MulBackward0.self": 1, "MulBackward0.other": None},
    "P6": {"CosBackward0.self": None, "ExpBackward0.result": 1},
    "P7": {"MulBackward0.other": 0, "SigmoidBackward0.result": 1},
    "P8": {"SinBackward0.self": None, "MulBackward0.self": 1},
}

# %%
tk.check("ex02")
