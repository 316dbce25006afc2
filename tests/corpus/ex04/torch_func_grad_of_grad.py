# expect: q1=full q2=full
# why: q1 an OrderedDict; q2 torch.func.grad of the sum of torch.func.grad (elementwise f, so that is f''), another valid autograd route
# ambiguous: needs the test's custom autograd.Function to support torch.func transforms (setup_context style); the prompt says 'differentiate with autograd', torch.func is autograd's functional API
# %%
import torch

import tracekit as tk

# %%
import collections

q1_needs = collections.OrderedDict()
for pid, names in [
    ("R1", "MulBackward0.other"), ("R2", ""), ("R3", "MulBackward0.other"), ("R4", "MulBackward0.self"),
    ("R5", "ExpBackward0.result"), ("R6", "PowBackward0.self"), ("R7", "MmBackward0.mat2"),
    ("R8", "ReluBackward0.result"), ("R9", ""),
    ("R10", "TanhBackward0.result ExpBackward0.result MulBackward0.self MulBackward0.other"),
]:
    q1_needs[pid] = set(names.split())

# %%
def second_derivative(f, x):
    import torch.func as tf

    first = tf.grad(lambda t: f(t).sum())
    return tf.grad(lambda t: first(t).sum())(x.detach())

# %%
tk.check("ex04")
