# expect: q1=zero q2=zero q3=zero
# why: pastes the lesson's neuron trace (sigmoid, sub, mul) as the answer for every program

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
_neuron = ["SigmoidBackward0", "SubBackward0", "MulBackward0"]
q1_order = {f"P{i}": list(_neuron) for i in range(1, 9)}

# %%
q2_reads = {f"P{i}": {"SigmoidBackward0": {"result"}, "SubBackward0": set(), "MulBackward0": {"self", "other"}}
            for i in range(1, 9)}

# %%
q3_freed = {f"P{i}": {"SigmoidBackward0.result": None, "MulBackward0.self": None, "MulBackward0.other": None}
            for i in range(1, 9)}

# %%
tk.check("ex02")
