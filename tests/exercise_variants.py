"""Answers a student might give, per exercise: correct variants (every form and fix a lesson or
PyTorch's docs accept) and wrong or gaming ones, each with the exact score it must earn on any
draw. Questions not named in a variant take the reference answer. Shared by the in-process
tests (tk.check) and the batch-grading test (tracekit grade on notebooks)."""

import sys
from pathlib import Path

from tracekit.exercises.ex06 import TRAIN
from tracekit.exercises.ex10 import rule_cells

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "solutions"))
from answers import SOLUTIONS  # noqa: E402

# exercises whose checks take seconds (training loops, budgets, torch.func): their tests are slow-marked
HEAVY = {"ex06", "ex07", "ex08", "ex09", "ex10"}

SIG_INPUT = '''class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)  # the input: sigma is recomputed in backward
        return torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * s * (1 - s)'''

SIG_DETACHED_OUTPUT = '''class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(y.detach())  # the output's own storage
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (y - y * y)'''

SIG_BOTH = '''class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y * (1 - y)'''

SIG_CLASS_ATTR = '''class Sigmoid(torch.autograd.Function):
    last = None

    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        Sigmoid.last = y  # a global slot: the next call overwrites it
        return y

    @staticmethod
    def backward(ctx, grad):
        y = Sigmoid.last
        return grad * y * (1 - y)'''

SIG_CTX_ATTR = '''class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.y = y  # escapes save_for_backward
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.y * (1 - ctx.y)'''

Q1_SETS = {"mul:a": {"other"}, "mul:b": {"self"}, "mul:ab": {"self", "other"}, "div:a": {"other"},
           "div:b": {"self", "other"}, "div:ab": {"self", "other"}, "mm:a": {"mat2"}, "mm:b": {"self"},
           "mm:ab": {"self", "mat2"}, "sub:a": set(), "sub:b": set(), "sub:ab": set()}
Q2_SETS = {"exp": "result", "tanh": "result", "sigmoid": "result", "sqrt": "result", "relu": "result",
           "reciprocal": "result", "expm1": "result", "rsqrt": "result", "sin": "self", "cos": "self",
           "log": "self", "abs": "self", "log1p": "self", "erf": "self", "atan": "self"}

VARIANTS = {
    "ex01": [
        ("reference", {}, {"q1": 1, "q2": 1, "q3": 3}),
        ("lists in any order; saves the input", {
            "q1": f"q1_slots = {{k: sorted(v, reverse=True) for k, v in {Q1_SETS!r}.items()}}",
            "q2": f"q2_slots = dict({Q2_SETS!r}, neg=[])",
            "q3": SIG_INPUT}, {"q1": 1, "q2": 1, "q3": 3}),
        ("tuples, strings with spaces; saves output.detach()", {
            "q1": f"q1_slots = {{k: tuple(v) for k, v in {Q1_SETS!r}.items()}}",
            "q2": f"q2_slots = {{k: ' ' + v + ' ' for k, v in {Q2_SETS!r}.items()}}\nq2_slots['neg'] = set()",
            "q3": SIG_DETACHED_OUTPUT}, {"q1": 1, "q2": 1, "q3": 3}),
        ("a slot no rule saves; both x and y saved", {
            "q1": f"q1_slots = {{k: {{'result'}} for k in {list(Q1_SETS)!r}}}",
            "q2": f"q2_slots = {{k: {{'self', 'result'}} for k in {list(Q2_SETS)!r} + ['neg']}}",
            "q3": SIG_BOTH}, {"q1": 0, "q2": 0, "q3": 2}),
        ("wrong shapes of answer; a global slot", {
            "q1": "q1_slots = ['other']",
            "q2": "class Sneaky(dict):\n    def __eq__(self, other):\n        return True\n\nq2_slots = Sneaky()",
            "q3": SIG_CLASS_ATTR}, {"q1": 0, "q2": 0, "q3": 1}),
        ("every slot; a tensor kept on ctx", {
            "q1": f"q1_slots = {{k: {{'self', 'other', 'mat2'}} for k in {list(Q1_SETS)!r}}}",
            "q2": f"q2_slots = {{k: {{'self'}} if v == 'result' else {{'result'}} for k, v in {Q2_SETS!r}.items()}}\n"
                  "q2_slots['neg'] = {'self'}",
            "q3": SIG_CTX_ATTR}, {"q1": 0, "q2": 0, "q3": 2}),
    ],
}


def _reference(exercise_id: str, name: str) -> object:
    """A reference data answer's value (to write variants of it as self-contained cells)."""
    ns: dict = {}
    exec(next(src for src in SOLUTIONS[exercise_id].values() if src.lstrip().startswith(name)), ns)
    return ns[name]


ORDER, READS, FREED = (_reference("ex02", n) for n in ("q1_order", "q2_reads", "q3_freed"))
NEEDS = _reference("ex04", "q1_needs")
VERSIONS = _reference("ex05", "q2_versions")
PACKS = _reference("ex07", "q1_pack_calls")
LARGEST = _reference("ex09", "q1_largest")

ALT_ORDER = dict(ORDER, P6=["SumBackward0", "AddBackward0", "CosBackward0", "ExpBackward0"])

VARIANTS["ex02"] = [
    ("reference", {}, {"q1": 2, "q2": 2, "q3": 2}),
    ("another valid order; lists in other orders", {
        "q1": f"q1_order = {ALT_ORDER!r}",
        "q2": f"q2_reads = {{p: {{n: sorted(s, reverse=True) for n, s in d.items()}} for p, d in {READS!r}.items()}}",
    }, {"q1": 2, "q2": 2, "q3": 2}),
    ("tuples and None for nothing; keys with spaces", {
        "q2": f"q2_reads = {{p: {{n: (tuple(s) or None) for n, s in d.items()}} for p, d in {READS!r}.items()}}",
        "q3": f"q3_freed = {{p: {{' ' + k: v for k, v in d.items()}} for p, d in {FREED!r}.items()}}",
    }, {"q1": 2, "q2": 2, "q3": 2}),
    ("forward order; reads nothing; everything freed first", {
        "q1": f"q1_order = {{p: list(reversed(o)) for p, o in {ORDER!r}.items()}}",
        "q2": f"q2_reads = {{p: {{n: set() for n in d}} for p, d in {READS!r}.items()}}",
        "q3": f"q3_freed = {{p: {{k: 0 for k in d}} for p, d in {FREED!r}.items()}}",
    }, {"q1": 0, "q2": 0, "q3": 0}),
    ("AccumulateGrad listed; unknown node names; keys without slots", {
        "q1": f"q1_order = {{p: o + ['torch::autograd::AccumulateGrad'] for p, o in {ORDER!r}.items()}}",
        "q2": f"q2_reads = {{p: {{n.replace('Backward0', ''): s for n, s in d.items()}}"
              f" for p, d in {READS!r}.items()}}",
        "q3": f"q3_freed = {{p: {{k.split('.')[0]: v for k, v in d.items()}} for p, d in {FREED!r}.items()}}",
    }, {"q1": 0, "q2": 0, "q3": 0}),
    ("a string for a list; every slot everywhere; every step off by one", {
        "q1": f"q1_order = {{p: ' '.join(o) for p, o in {ORDER!r}.items()}}",
        "q2": f"q2_reads = {{p: {{n: {{'self', 'other', 'result'}} for n in d}} for p, d in {READS!r}.items()}}",
        "q3": f"q3_freed = {{p: {{k: -1 if v is None else v + 1 for k, v in d.items()}}"
              f" for p, d in {FREED!r}.items()}}",
    }, {"q1": 0, "q2": 0, "q3": 0}),
]


def _bytes(pinned: str, visible_and_pinned: str) -> dict[str, str]:
    """ex03's two answer cells, from the bodies of its two functions (indented 4)."""
    return {"q1": f"def pinned_bytes(n, k, dtype):\n    {pinned}",
            "q2": f"def visible_and_pinned(n, dtype):\n    {visible_and_pinned}"}


ITEMSIZE = "s = dtype.itemsize\n    "
VARIANTS["ex03"] = [
    ("reference", {}, {"q1": 2, "q2": 2}),
    ("measured with torch and tracekit", _bytes(
        "return torch.empty(n, n, dtype=dtype).untyped_storage().nbytes()",
        "a = torch.randn(n, dtype=dtype, requires_grad=True)\n"
        "    h = a * 2\n    tr = tk.trace((h[:-1] * h[1:]).sum())\n    return [tr.visible_bytes, tr.saved_bytes]"),
     {"q1": 2, "q2": 2}),
    ("dtype.itemsize, a tuple", _bytes("return dtype.itemsize * n ** 2",
                                       ITEMSIZE + "return (2 * s * (n - 1) + 8, s * n + 8)"), {"q1": 2, "q2": 2}),
    ("the slice's own bytes; the scalar forgotten", _bytes("return k * dtype.itemsize",
                                                           ITEMSIZE + "return [2 * s * (n - 1), s * n]"),
     {"q1": 0, "q2": 0}),
    ("the lesson's measurement with the output; the allocation counted twice", _bytes(
        "return n * n * dtype.itemsize + dtype.itemsize", ITEMSIZE + "return [2 * s * (n - 1) + 8] * 2"),
     {"q1": 0, "q2": 1}),
    ("a whole float (accepted: a whole number of bytes); the scalar forgotten in the pinned bytes", _bytes(
        "return float(n * n * dtype.itemsize)", ITEMSIZE + "return [2 * s * (n - 1) + 8, s * n]"),
     {"q1": 2, "q2": 1}),
]

SECOND_FUNC = '''def second_derivative(f, x):
    d2 = torch.func.vmap(torch.func.grad(torch.func.grad(f)))
    return d2(x.detach().flatten()).reshape(x.shape)'''
SECOND_ONES = '''def second_derivative(f, x):
    (g,) = torch.autograd.grad(f(x), x, torch.ones_like(x), create_graph=True)
    return torch.autograd.grad(g, x, torch.ones_like(g))[0]'''
FIRST_ONLY = '''def second_derivative(f, x):
    return torch.autograd.grad(f(x).sum(), x)[0]'''
FINITE_DIFF = '''def second_derivative(f, x):
    h = 1e-3
    with torch.no_grad():
        return (f(x + h) - 2 * f(x) + f(x - h)) / h**2'''
INTO_GRAD = '''def second_derivative(f, x):
    (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    g.sum().backward()  # accumulates into x.grad: right once, wrong the second time
    return x.grad'''

VARIANTS["ex04"] = [
    ("reference", {}, {"q1": 2, "q2": 3}),
    ("lists; torch.func", {"q1": f"q1_needs = {{k: sorted(v) for k, v in {NEEDS!r}.items()}}",
                           "q2": SECOND_FUNC}, {"q1": 2, "q2": 3}),
    ("tuples, None for nothing; grad_outputs of ones", {
        "q1": f"q1_needs = {{k: tuple(v) or None for k, v in {NEEDS!r}.items()}}", "q2": SECOND_ONES},
     {"q1": 2, "q2": 3}),
    ("a value no graph saves; the first derivative", {
        "q1": f"q1_needs = {{k: {{'SumBackward0.self'}} for k in {list(NEEDS)!r}}}", "q2": FIRST_ONLY},
     {"q1": 0, "q2": 0}),
    ("not a dict; finite differences", {"q1": "q1_needs = ['MulBackward0.other']", "q2": FINITE_DIFF},
     {"q1": 0, "q2": 0}),
    ("an extra value everywhere; accumulates in x.grad", {
        "q1": f"q1_needs = {{k: set(v) | {{'X.y'}} for k, v in {NEEDS!r}.items()}}", "q2": INTO_GRAD},
     {"q1": 0, "q2": 2}),
]

REORDER = '''def fixed(a):
    h = a * 2
    y = h.sin()
    loss = y.sum()
    loss.backward()  # backward first, while h is as sin saved it
    h.add_(1)
    return loss, h'''
CLONE = '''def fixed(a):
    h = a * 2
    y = h.clone().sin()  # sin saves its own copy
    h.add_(1)
    return y.sum(), h'''
DATA = '''def fixed(a):
    h = a * 2
    y = h.sin()
    h.data.add_(1)  # skips the version check: the gradient is silently wrong
    return y.sum(), h'''
NO_GRAD = '''def fixed(a):
    h = a * 2
    y = h.sin()
    with torch.no_grad():
        h.add_(1)  # still bumps the version counter
    return y.sum(), h'''
DROPPED = '''def fixed(a):
    h = a * 2
    y = h.sin()
    return y.sum(), h  # backward works, but h_next lost its + 1'''

VARIANTS["ex05"] = [
    ("reference", {}, {"q1": 3, "q2": 2}),
    ("reorder: backward inside; tuples", {"q1": REORDER,
                                         "q2": f"q2_versions = {{k: tuple(v) for k, v in {VERSIONS!r}.items()}}"},
     {"q1": 3, "q2": 2}),
    ("sin on a clone", {"q1": CLONE}, {"q1": 3, "q2": 2}),
    (".data write; versions off", {
        "q1": DATA, "q2": f"q2_versions = {{k: [v[1] + 1, v[0]] for k, v in {VERSIONS!r}.items()}}"},
     {"q1": 0, "q2": 0}),
    ("write under no_grad; a string", {"q1": NO_GRAD, "q2": "q2_versions = {'V1': '0, 2'}"}, {"q1": 0, "q2": 0}),
    ("the +1 dropped; one number", {"q1": DROPPED, "q2": f"q2_versions = {{k: v[1] for k, v in {VERSIONS!r}.items()}}"},
     {"q1": 0, "q2": 0}),
]

VARIANTS["ex06"] = [
    ("reference .item()", {}, {"q1": 4}),
    (".detach()", {"q1": TRAIN.format(diag="history.append(model(x_val).pow(2).mean().detach())", ret="history")},
     {"q1": 4}),
    ("diagnostic under no_grad", {"q1": TRAIN.format(
        diag="with torch.no_grad():\n            history.append(model(x_val).pow(2).mean())", ret="history")},
     {"q1": 4}),
    ("float()", {"q1": TRAIN.format(diag="val = model(x_val).pow(2).mean()\n        history.append(float(val))",
                                    ret="history")}, {"q1": 4}),
    ("keeps every graph (the stub)", {"q1": TRAIN.format(diag="history.append(model(x_val).pow(2).mean())",
                                                         ret="history")}, {"q1": 0}),
    ("floats returned, tensors stashed in a global", {"q1": "KEPT = []\n\n" + TRAIN.format(
        diag="val = model(x_val).pow(2).mean()\n        KEPT.append(val)\n        history.append(val.item())",
        ret="history")}, {"q1": 0}),
    ("keeps every graph, converts at the end", {"q1": TRAIN.format(
        diag="history.append(model(x_val).pow(2).mean())", ret="[v.item() for v in history]")}, {"q1": 0}),
    ("module-level state: a step counter and a weakref set", {"q1": "import itertools\nimport weakref\n\n"
     "STEPS = itertools.count()\nSEEN = weakref.WeakSet()\n\n" + TRAIN.format(
         diag="val = model(x_val).pow(2).mean()\n        SEEN.add(val)\n        next(STEPS)\n"
              "        history.append(val.item())", ret="history")}, {"q1": 4}),
    ("a NumPy array of floats (a 1-D array of one number per step)", {"q1": "import numpy as np\n\n" + TRAIN.format(
        diag="history.append(model(x_val).pow(2).mean().item())", ret="np.array(history)")}, {"q1": 4}),
    ("a tuple of floats", {"q1": TRAIN.format(diag="history.append(model(x_val).pow(2).mean().item())",
                                              ret="tuple(history)")}, {"q1": 4}),
    ("a tensor with history every third step (the prompt excludes them; memory alone would pass)", {
        "q1": TRAIN.format(diag="val = model(x_val).pow(2).mean()\n        history.append(val if _ % 3 == 0 else "
                                "val.item())", ret="history")}, {"q1": 0}),
    ("the steps' graphs stacked into one tensor with history", {"q1": TRAIN.format(
        diag="history.append(model(x_val).pow(2).mean())", ret="torch.stack(history)")}, {"q1": 0}),
    ("diagnostic before the step", {"q1": '''def train(model, x, x_val, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        history.append(model(x_val).pow(2).mean().item())
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return history'''}, {"q1": 0}),
]

HOOKS_FINALIZE = '''import weakref

STORE = {}


class Key:
    pass


def pack(t):
    key = Key()
    STORE[id(key)] = t.detach()
    weakref.finalize(key, STORE.pop, id(key), None)  # the entry goes with the handle
    return key


def unpack(key):
    return STORE[id(key)]


hooks = (pack, unpack)'''
HOOKS_KEEP_T = '''STORE = {}


class Handle:
    def __init__(self, t):
        self.key = id(self)
        STORE[self.key] = t  # not t.detach()

    def __del__(self):
        STORE.pop(self.key, None)


hooks = (Handle, lambda handle: STORE[handle.key])'''
HOOKS_CARRIER = '''class Box:
    """A store of one: the handle carries the tensor, and goes with the graph."""

    def __init__(self, t):
        self.t = t.detach()


def unbox(box):
    return box.t


hooks = (Box, unbox)'''
HOOKS_OLD = '''STORE = {}

def pack(t):
    key = len(STORE)
    STORE[key] = t
    return key

def unpack(key):
    return STORE.pop(key)

hooks = (pack, unpack)'''
HOOKS_NEVER_FREE = '''STORE = {}


class Counter:
    n = 0


def pack(t):
    Counter.n += 1  # unique int keys, never reused
    key = Counter.n
    STORE[key] = t
    return key

def unpack(key):
    return STORE[key]

hooks = (pack, unpack)'''
HOOKS_IDENTITY = "def same(t):\n    return t\n\n\nhooks = (same, same)"
HOOKS_ONE_SLOT = '''SLOT = {}

def pack(t):
    SLOT["t"] = t
    return 0

def unpack(key):
    return SLOT["t"]

hooks = (pack, unpack)'''

VARIANTS["ex07"] = [
    ("reference handle with __del__", {}, {"q1": 1, "q2": 3}),
    ("weakref.finalize", {"q2": HOOKS_FINALIZE}, {"q1": 1, "q2": 3}),
    ("a handle that carries the tensor", {"q2": HOOKS_CARRIER}, {"q1": 1, "q2": 3}),
    ("len(STORE) keys and pop on unpack", {"q1": f"q1_pack_calls = {{k: 99 for k in {list(PACKS)!r}}}",
                                           "q2": HOOKS_OLD}, {"q1": 0, "q2": 0}),
    ("a store that never lets go", {"q1": "q1_pack_calls = [4]", "q2": HOOKS_NEVER_FREE}, {"q1": 0, "q2": 1.5}),
    ("pack returns the tensor: a saved output then holds itself, a graph dropped without backward leaks",
     {"q1": f"q1_pack_calls = {{k: v + 1 for k, v in {PACKS!r}.items()}}", "q2": HOOKS_IDENTITY},
     {"q1": 0, "q2": 1.5}),
    ("one global slot", {"q2": HOOKS_ONE_SLOT}, {"q1": 1, "q2": 0}),
    # the prompt: keep t.detach(), since a store that keeps t leaks a graph dropped without backward (the
    # measured run drops two after every graph it backwards): each store right in every other way
    ("keeps t itself: handle with __del__", {"q2": HOOKS_KEEP_T}, {"q1": 1, "q2": 1.5}),
    ("keeps t itself: weakref.finalize", {"q2": HOOKS_FINALIZE.replace("t.detach()", "t")}, {"q1": 1, "q2": 1.5}),
    ("keeps t itself: the handle carries it", {"q2": HOOKS_CARRIER.replace("t.detach()", "t")},
     {"q1": 1, "q2": 1.5}),
]

PLAN = "def checkpoint_plan(depth):\n    {body}"
VARIANTS["ex08"] = [
    ("reference: first half", {}, {"q1": 4}),
    ("a middle segment", {"q1": PLAN.format(body="k, s = depth // 2, depth // 4\n    return [(s, s + k)]")},
     {"q1": 4}),
    ("the last 45 %, as a list of lists", {"q1": "import math\n\n" + PLAN.format(
        body="k = math.ceil(0.45 * depth)\n    return [[depth - k, depth]]")}, {"q1": 4}),
    ("the first half rounded up, numpy ints", {"q1": "import numpy as np\n\n" + PLAN.format(
        body="return [(np.int64(0), np.int64((depth + 1) // 2))]")}, {"q1": 4}),
    ("no checkpoint", {"q1": PLAN.format(body="return []")}, {"q1": 0}),
    ("everything in one checkpoint", {"q1": PLAN.format(body="return [(0, depth)]")}, {"q1": 0}),
    ("hard-coded for depth 8", {"q1": PLAN.format(body="return [(0, 4)]")}, {"q1": round(4 * 6 / 9, 2)}),
]

VARIANTS["ex09"] = [
    ("reference", {}, {"q1": 2, "q2": 2}),
    ("names in other case; itemsize", {
        "q1": f"q1_largest = {{k: ' ' + v.upper() for k, v in {LARGEST!r}.items()}}",
        "q2": "def adam_state_bytes(model):\n"
              "    return sum(2 * p.numel() * p.dtype.itemsize + 4 for p in model.parameters())"}, {"q1": 2, "q2": 2}),
    ("Adam run on a copy", {"q2": '''import copy


def adam_state_bytes(model):
    m = copy.deepcopy(model)
    opt = torch.optim.Adam(m.parameters())
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    return sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values())'''},
     {"q1": 2, "q2": 2}),
    ("a name the table does not use; no step counts", {
        "q1": f"q1_largest = {{k: 'activations' for k in {list(LARGEST)!r}}}",
        "q2": "def adam_state_bytes(model):\n"
              "    return sum(2 * p.numel() * p.element_size() for p in model.parameters())"},
     {"q1": 0, "q2": 0}),
    ("parameters everywhere; one moment", {
        "q1": f"q1_largest = {{k: 'parameters' for k in {list(LARGEST)!r}}}",
        "q2": "def adam_state_bytes(model):\n"
              "    return sum(p.numel() * p.element_size() + 4 for p in model.parameters())"}, {"q1": 0, "q2": 0}),
    ("a list; a whole float (accepted: a whole number of bytes)", {"q1": "q1_largest = ['optimizer state']",
                         "q2": "def adam_state_bytes(model):\n"
                               "    return float(sum(2 * p.numel() * p.element_size() + 4\n"
                               "                     for p in model.parameters()))"},
     {"q1": 0, "q2": 2}),
]

def _rules(div: tuple[str, str], tanh: tuple[str, str], sin: tuple[str, str]) -> dict[str, str]:
    return rule_cells({"div": div, "tanh": tanh, "sin": sin})


VARIANTS["ex10"] = [
    ("reference", {}, {"q1": 2, "q2": 1, "q3": 1}),
    ("torch functions, lists, another order", _rules(
        ("return torch.div(a, b), [b, a]", "b, a = saved\n    return [torch.div(grad, b), -grad * a / b**2]"),
        ("y = x.tanh()\n    return y, [y]", "return grad - grad * saved[0] ** 2"),
        ("return x.sin(), [x]", "return saved[0].cos() * grad")),
     {"q1": 2, "q2": 1, "q3": 1}),
    ("static methods of a class", {"q1": '''class Div:
    @staticmethod
    def forward(a, b):
        return a / b, (a, b)

    @staticmethod
    def backward(saved, grad):
        a, b = saved
        g = grad / b
        return g, -g * a / b


div_rule = (Div.forward, Div.backward)'''}, {"q1": 2, "q2": 1, "q3": 1}),
    ("new tensors saved: 1/b, a copy, the output", _rules(
        ("r = 1 / b\n    return a * r, (r, a / b)", "r, q = saved\n    return grad * r, -grad * q * r"),
        ("return x.tanh(), (x.clone(),)", "return (grad * (1 - saved[0].tanh() ** 2),)"),
        ("y = x.sin()\n    return y, (y,)", "return grad * (1 - saved[0] ** 2) ** 0.5")),
     {"q1": 1, "q2": 0.5, "q3": 0}),
    ("everything saved; tanh recomputed from x", _rules(
        ("y = a / b\n    return y, (a, b, y)", "a, b, y = saved\n    return grad / b, -grad * y / b"),
        ("return x.tanh(), (x,)", "return grad * (1 - torch.tanh(saved[0]) ** 2)"),
        ("y = x.sin()\n    return y, (x, y)", "return grad * saved[0].cos()")),
     {"q1": 1, "q2": 0.5, "q3": 0.5}),
    ("values kept in a global, nothing saved", {k: "G = {}\n\n" + v for k, v in _rules(
        ("G['ab'] = (a, b)\n    return a / b, ()", "a, b = G['ab']\n    return grad / b, -grad * a / (b * b)"),
        ("G['y'] = x.tanh()\n    return G['y'], ()", "return grad * (1 - G['y'] ** 2)"),
        ("G['x'] = x\n    return x.sin(), ()", "return grad * G['x'].cos()")).items()},
     {"q1": 0, "q2": 0, "q3": 0}),
]
