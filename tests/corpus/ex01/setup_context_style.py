# expect: q1=full q2=full q3=full
# why: tables from a lookup table built by a call at module level; Sigmoid uses torch 2's forward(x) + setup_context(ctx, inputs, output) and saves the output
# ambiguous: the prompt names forward(ctx, x); this uses the torch>=2.0 forward(x)+setup_context form, which also saves exactly the output

# %%
import torch

import tracekit as tk

# %%
def _build():
    per_input = {  # what each input's gradient needs
        "mul": ({"other"}, {"self"}),
        "div": ({"other"}, {"self", "other"}),
        "mm": ({"mat2"}, {"self"}),
        "sub": (set(), set()),
    }
    table = {}
    for op, (for_a, for_b) in per_input.items():
        table[op + ":a"] = set(for_a)
        table[op + ":b"] = set(for_b)
        table[op + ":ab"] = for_a | for_b
    return table


q1_slots = _build()

# %%
q2_slots = {
    "exp": {"result"},
    "tanh": {"result"},
    "sigmoid": {"result"},
    "sin": {"self"},
    "cos": {"self"},
    "log": {"self"},
    "sqrt": {"result"},
    "relu": {"result"},
    "abs": {"self"},
    "reciprocal": {"result"},
    "expm1": {"result"},
    "log1p": {"self"},
    "rsqrt": {"result"},
    "erf": {"self"},
    "atan": {"self"},
    "neg": set(),
}

# %%
class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * (1 - y)

# %%
tk.check("ex01")
