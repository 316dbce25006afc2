"""Reference answers, one dict of notebook cells per exercise (kept out of the student tree).

`python solutions/build.py` writes the student notebooks (exercises/, with stubs) and the
reference notebooks (solutions/, with these answers) from the same question list.
"""

from tracekit.exercises.ex06 import TRAIN
from tracekit.exercises.ex10 import rule_cells

SOLUTIONS = {
    "ex01": {
        "q1": '''q1_slots = {
    # mul: each input's gradient is grad times the *other* input
    "mul:a": {"other"}, "mul:b": {"self"}, "mul:ab": {"self", "other"},
    # div: d/da = grad / b needs b; d/db = -grad * a / b**2 needs a and b
    "div:a": {"other"}, "div:b": {"self", "other"}, "div:ab": {"self", "other"},
    # mm: d/da = grad @ b.T needs b (mat2); d/db = a.T @ grad needs a (self)
    "mm:a": {"mat2"}, "mm:b": {"self"}, "mm:ab": {"self", "mat2"},
    # sub: gradients are ±grad, nothing saved
    "sub:a": set(), "sub:b": set(), "sub:ab": set(),
}''',
        "q2": '''q2_slots = {
    # derivatives cheapest in terms of the output y
    "exp": {"result"}, "tanh": {"result"}, "sigmoid": {"result"}, "sqrt": {"result"}, "relu": {"result"},
    "reciprocal": {"result"}, "expm1": {"result"}, "rsqrt": {"result"},
    # derivatives that need the input x
    "sin": {"self"}, "cos": {"self"}, "log": {"self"}, "abs": {"self"}, "log1p": {"self"}, "erf": {"self"},
    "atan": {"self"},
    "neg": set(),  # d(-x) = -grad: nothing saved
}''',
        "q3": '''class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = 1 / (1 + torch.exp(-x))
        ctx.save_for_backward(y)  # the output is all the rule needs: no recompute in backward
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * (1 - y)''',
    },
    "ex02": {
        "q1": '''q1_order = {
    "P1": ["SumBackward0", "MulBackward0", "ExpBackward0"],
    "P2": ["SumBackward0", "MulBackward0", "SinBackward0"],
    "P3": ["SumBackward0", "DivBackward0", "TanhBackward0"],
    "P4": ["SumBackward0", "ExpBackward0", "MulBackward0"],
    "P5": ["SumBackward0", "MulBackward0", "SigmoidBackward0"],
    "P6": ["SumBackward0", "AddBackward0", "ExpBackward0", "CosBackward0"],
    "P7": ["SumBackward0", "SigmoidBackward0", "MulBackward0"],
    "P8": ["SumBackward0", "MulBackward0", "SinBackward0"],
}''',
        "q2": '''q2_reads = {
    "P1": {"SumBackward0": set(), "MulBackward0": {"self", "other"}, "ExpBackward0": {"result"}},
    "P2": {"SumBackward0": set(), "MulBackward0": {"other"}, "SinBackward0": {"self"}},
    "P3": {"SumBackward0": set(), "DivBackward0": {"self", "other"}, "TanhBackward0": {"result"}},
    "P4": {"SumBackward0": set(), "ExpBackward0": {"result"}, "MulBackward0": {"self", "other"}},
    "P5": {"SumBackward0": set(), "MulBackward0": {"self", "other"}, "SigmoidBackward0": {"result"}},
    "P6": {"SumBackward0": set(), "AddBackward0": set(), "ExpBackward0": {"result"}, "CosBackward0": {"self"}},
    "P7": {"SumBackward0": set(), "SigmoidBackward0": {"result"}, "MulBackward0": {"other"}},
    "P8": {"SumBackward0": set(), "MulBackward0": {"self"}, "SinBackward0": {"self"}},
}''',
        "q3": '''q3_freed = {
    # a value you hold (a, b) is never freed by backward; an intermediate goes after its last reader
    "P1": {"ExpBackward0.result": 2, "MulBackward0.self": 2, "MulBackward0.other": None},
    "P2": {"MulBackward0.other": None, "SinBackward0.self": None},
    "P3": {"TanhBackward0.result": 2, "DivBackward0.self": 2, "DivBackward0.other": None},
    "P4": {"ExpBackward0.result": 1, "MulBackward0.self": None, "MulBackward0.other": None},
    "P5": {"SigmoidBackward0.result": 2, "MulBackward0.self": 2, "MulBackward0.other": None},
    "P6": {"ExpBackward0.result": 2, "CosBackward0.self": None},
    "P7": {"SigmoidBackward0.result": 1, "MulBackward0.other": 2},  # the wrapped 3 goes with its rule
    "P8": {"MulBackward0.self": 1, "SinBackward0.self": None},
}''',
    },
    "ex03": {
        "q1": '''def pinned_bytes(n, k, dtype):
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return n * n * itemsize  # the saved slice keeps big's whole allocation''',
        "q2": '''def visible_and_pinned(n, dtype):
    itemsize = torch.empty(0, dtype=dtype).element_size()
    visible = 2 * (n - 1) * itemsize + 8  # two overlapping views of h, plus the saved 2 (0-dim int64)
    pinned = n * itemsize + 8             # one allocation for h, one for the scalar
    return [visible, pinned]''',
    },
    "ex04": {
        "q1": '''q1_needs = {
    "R1": {"MulBackward0.other"},      # the wrapped 2
    "R2": set(),                       # add saves nothing
    "R3": {"MulBackward0.other"},      # b, for a's gradient
    "R4": {"MulBackward0.self"},       # a, for b's gradient
    "R5": {"ExpBackward0.result"},
    "R6": {"PowBackward0.self"},       # (a - b), for the square's rule
    "R7": {"MmBackward0.mat2"},        # B, for A's gradient
    "R8": {"ReluBackward0.result"},
    "R9": set(),                       # sin runs without a graph: a does not require grad
    "R10": {"TanhBackward0.result", "ExpBackward0.result", "MulBackward0.self", "MulBackward0.other"},
}''',
        "q2": '''def second_derivative(f, x):
    (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)  # keep a graph of the derivative
    (h,) = torch.autograd.grad(g.sum(), x)  # elementwise f: the sum's gradient is the diagonal
    return h''',
    },
    "ex05": {
        "q1": '''def fixed(a):
    h = a * 2
    y = h.sin()
    h_next = h + 1  # out of place: the h that sin saved keeps its value
    return y.sum(), h_next''',
        "q2": '''q2_versions = {
    "V1": [0, 2], "V2": [1, 2], "V3": [0, 1],  # a write through a view bumps the base's counter
    "V4": [0, 1],  # writes under no_grad still count
    "V5": [0, 1],  # .detach() shares the version counter
    "V6": [0, 0],  # .data does not: the check is skipped (and the gradient would be wrong)
    "V7": [2, 5], "V8": [0, 2], "V9": [1, 1],
}''',
    },
    "ex06": {
        "q1": TRAIN.format(diag="val = model(x_val).pow(2).mean()\n        "
                                "history.append(val.item())  # a number, not the graph", ret="history"),
    },
    "ex07": {
        "q1": '''q1_pack_calls = {
    "H1": 4,  # sin saves a, cos saves a, mul saves both factors
    "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3,
    "H7": 2,  # mm saves x for W's gradient; relu saves its result
    "H8": 2, "H9": 1,
    "H10": 1,  # relu's result; the wrapped 2 is saved without the hooks
}''',
        "q2": '''STORE = {}


class Handle:
    """What the graph keeps instead of the tensor; when the graph drops it, the entry goes."""

    def __init__(self, t):
        self.key = id(self)  # unique while the handle lives, and the entry lives no longer
        STORE[self.key] = t.detach()  # not t: a saved output would hold its own handle

    def __del__(self):
        STORE.pop(self.key, None)


def pack(t):
    return Handle(t)


def unpack(handle):
    return STORE[handle.key]  # no pop: retain_graph may unpack again


hooks = (pack, unpack)''',
    },
    "ex08": {
        "q1": '''from tracekit.exercises.ex08 import checkpointed_loss, plain_loss, setup  # noqa: F401 - try it


def checkpoint_plan(depth):
    # one segment over the first half: keeps about half the activations, redoes half the blocks
    return [(0, depth // 2)]''',
    },
    "ex09": {
        "q1": '''q1_largest = {
    "C1": "optimizer state",          # 2 × 1 M parameters of Adam moments, batch of 16
    "C2": "saved activations",        # batch 4096 × width 64 per layer
    "C3": "saved activations",
    "C4": "application references",   # the 4096 × 1024 input batch itself
    "C5": "saved activations",
    "C6": "application references",
}''',
        "q2": '''def adam_state_bytes(model):
    params = list(model.parameters())
    moments = 2 * sum(p.numel() * p.element_size() for p in params)  # exp_avg and exp_avg_sq
    steps = 4 * len(params)  # one 0-dim float32 step count per parameter tensor
    return moments + steps''',
    },
}

SOLUTIONS["ex10"] = rule_cells({
    "div": ("return a / b, (a, b)  # d/da = 1/b needs b; d/db = -a/b² needs a and b",
            "a, b = saved\n    return grad / b, -grad * a / (b * b)"),
    "tanh": ("y = torch.tanh(x)\n    return y, (y,)  # tanh' = 1 − tanh²: the output is enough",
             "(y,) = saved\n    return grad * (1 - y * y)"),
    "sin": ("return torch.sin(x), (x,)  # sin' = cos(x): needs the input, not the output",
            "(x,) = saved\n    return grad * torch.cos(x)"),
})
