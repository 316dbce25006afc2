"""Reference answers, one dict of notebook cells per exercise (kept out of the student tree).

`python solutions/build.py` writes the student notebooks (exercises/, with stubs) and the
reference notebooks (solutions/, with these answers) from the same question list.
"""

SOLUTIONS = {
    "ex01": {
        "q1": 'q1_slots = ["other"]',
        "q2": 'q2_slot = "result"',
        "q3": '''class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = 1 / (1 + torch.exp(-x))
        ctx.save_for_backward(y)  # the output is all the rule needs
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y * (1 - y)''',
    },
    "ex02": {
        "q1": 'q1_order = ["SumBackward0", "MulBackward0", "ExpBackward0"]',
        "q2": 'q2_reads = {"SumBackward0": [], "MulBackward0": ["self", "other"], "ExpBackward0": ["result"]}',
        "q3": 'q3_freed = {"ExpBackward0.result": 2, "MulBackward0.self": 2, "MulBackward0.other": None}',
    },
    "ex03": {
        "q1": '''def pinned_bytes(n, k):
    return n * n * 4  # the slice keeps the whole float32 allocation''',
        "q2": '''def visible_and_pinned(n):
    visible = 2 * (n - 1) * 4 + 8  # two overlapping views of h, plus the saved scalar 2 (float64)
    pinned = n * 4 + 8             # one allocation for h, one for the scalar
    return [visible, pinned]''',
    },
    "ex04": {
        "q1": "q1_raises = True  # mul saves the scalar 2 (as a tensor): released after the first backward",
        "q2": "q2_raises = False  # add saves nothing",
        "q3": '''def second_derivative(f, x):
    (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x)
    return h''',
    },
    "ex05": {
        "q1": '''def fixed(a):
    h = a * 2
    y = h.sin()
    h_next = h + 1  # out of place: the h that sin saved keeps its value
    return y.sum(), h_next''',
        "q2": "q2_versions = [0, 2]",
    },
    "ex06": {
        "q1": '''def train(model, x, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        history.append(loss.item())  # a number, not the graph
    return history''',
    },
    "ex07": {
        "q1": "q1_pack_calls = 4",
        "q2": '''STORE = {}

def pack(t):
    key = len(STORE)
    STORE[key] = t
    return key

def unpack(key):
    return STORE.pop(key)

hooks = (pack, unpack)''',
    },
    "ex08": {
        "q1": '''from torch.utils.checkpoint import checkpoint

def _blocks(h, *ws):
    for w in ws:
        h = torch.tanh(h @ w)
    return h

def loss_fn(x, ws):
    h = x
    for i in range(0, len(ws), 4):  # two segments of four blocks: only their inputs are kept
        h = checkpoint(_blocks, h, *ws[i:i + 4], use_reentrant=False)
    return h.pow(2).mean()''',
    },
    "ex09": {
        "q1": 'q1_largest = "saved activations"',
        "q2": '''def adam_state_bytes(model):
    params = list(model.parameters())
    moments = 2 * sum(p.numel() * p.element_size() for p in params)
    steps = 4 * len(params)  # one float32 step count per parameter tensor
    return moments + steps''',
    },
}
