# expect: q1=zero q2=zero q3=zero
# why: wrong naming throughout: op names instead of node names ('sum', 'mul'), q3 keyed 'Node:slot' with the slot index words

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_order = {
    "P1": ["sum", "mul", "exp"], "P2": ["sum", "mul", "sin"], "P3": ["sum", "div", "tanh"], "P4": ["sum", "exp", "mul"],
    "P5": ["sum", "mul", "sigmoid"], "P6": ["sum", "add", "exp", "cos"], "P7": ["sum", "sigmoid", "mul"],
    "P8": ["sum", "mul", "sin"],
}

# %%
q2_reads = {pid: {op: set() for op in order} for pid, order in q1_order.items()}
q2_reads["P1"]["mul"] = {"self", "other"}

# %%
q3_freed = {
    "P1": {"ExpBackward0:result": 2, "MulBackward0:self": 2, "MulBackward0:other": None},
    "P2": {"SinBackward0:self": None, "MulBackward0:other": None},
    "P3": {"TanhBackward0:result": 2, "DivBackward0:self": 2, "DivBackward0:other": None},
    "P4": {"MulBackward0:self": None, "MulBackward0:other": None, "ExpBackward0:result": 1},
    "P5": {"SigmoidBackward0:result": 2, "MulBackward0:self": 2, "MulBackward0:other": None},
    "P6": {"CosBackward0:self": None, "ExpBackward0:result": 2},
    "P7": {"MulBackward0:other": 2, "SigmoidBackward0:result": 1},
    "P8": {"SinBackward0:self": None, "MulBackward0:self": 1},
}

# %%
tk.check("ex02")
