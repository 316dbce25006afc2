# expect: q1=full q2=full q3=full
# why: orders given as tuples, slot sets as frozensets, freed steps as numpy int64 scalars
# ambiguous: q1 says 'the list of node names'; tuples hold the same ordered names

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
import numpy as np


q1_order = {
    "P1": ("SumBackward0", "MulBackward0", "ExpBackward0"),
    "P2": ("SumBackward0", "MulBackward0", "SinBackward0"),
    "P3": ("SumBackward0", "DivBackward0", "TanhBackward0"),
    "P4": ("SumBackward0", "ExpBackward0", "MulBackward0"),
    "P5": ("SumBackward0", "MulBackward0", "SigmoidBackward0"),
    "P6": ("SumBackward0", "AddBackward0", "ExpBackward0", "CosBackward0"),
    "P7": ("SumBackward0", "SigmoidBackward0", "MulBackward0"),
    "P8": ("SumBackward0", "MulBackward0", "SinBackward0"),
}

# %%
q2_reads = {
    "P1": {"SumBackward0": frozenset(), "MulBackward0": frozenset({"self", "other"}), "ExpBackward0": frozenset({"result"})},
    "P2": {"SumBackward0": frozenset(), "MulBackward0": frozenset({"other"}), "SinBackward0": frozenset({"self"})},
    "P3": {"SumBackward0": frozenset(), "DivBackward0": frozenset({"self", "other"}), "TanhBackward0": frozenset({"result"})},
    "P4": {"SumBackward0": frozenset(), "ExpBackward0": frozenset({"result"}), "MulBackward0": frozenset({"self", "other"})},
    "P5": {"SumBackward0": frozenset(), "MulBackward0": frozenset({"self", "other"}), "SigmoidBackward0": frozenset({"result"})},
    "P6": {"SumBackward0": frozenset(), "AddBackward0": frozenset(), "ExpBackward0": frozenset({"result"}), "CosBackward0": frozenset({"self"})},
    "P7": {"SumBackward0": frozenset(), "SigmoidBackward0": frozenset({"result"}), "MulBackward0": frozenset({"other"})},
    "P8": {"SumBackward0": frozenset(), "MulBackward0": frozenset({"self"}), "SinBackward0": frozenset({"self"})},
}

# %%
q3_freed = {
    "P1": {"ExpBackward0.result": np.int64(2), "MulBackward0.self": np.int64(2), "MulBackward0.other": None},
    "P2": {"SinBackward0.self": None, "MulBackward0.other": None},
    "P3": {"TanhBackward0.result": np.int64(2), "DivBackward0.self": np.int64(2), "DivBackward0.other": None},
    "P4": {"MulBackward0.self": None, "MulBackward0.other": None, "ExpBackward0.result": np.int64(1)},
    "P5": {"SigmoidBackward0.result": np.int64(2), "MulBackward0.self": np.int64(2), "MulBackward0.other": None},
    "P6": {"CosBackward0.self": None, "ExpBackward0.result": np.int64(2)},
    "P7": {"MulBackward0.other": np.int64(2), "SigmoidBackward0.result": np.int64(1)},
    "P8": {"SinBackward0.self": None, "MulBackward0.self": np.int64(1)},
}

# %%
tk.check("ex02")
