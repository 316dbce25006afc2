# expect: q1=full q2=full
# why: plain PyTorch: walks the graph, reads every _saved_* tensor, sums nbytes (visible) and distinct untyped storages (pinned)

# %%
import torch

import tracekit as tk

# %%
def _saved_tensors(y):
    """Every tensor saved by the graph behind y (one entry per residual)."""
    out, seen, todo = [], set(), [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for attr in dir(node):
            if attr.startswith("_saved_"):
                value = getattr(node, attr)
                if isinstance(value, torch.Tensor):
                    out.append(value)
        todo.extend(nxt for nxt, _ in node.next_functions)
    return out


def _pinned(tensors):
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def pinned_bytes(n, k, dtype):
    w = torch.ones(k, dtype=dtype, requires_grad=True)
    big = torch.randn(n, n, dtype=dtype)
    y = (big[0, :k] * w).sum()
    return _pinned(_saved_tensors(y))

# %%
def visible_and_pinned(n, dtype):
    a = torch.randn(n, dtype=dtype, requires_grad=True)
    h = a * 2
    y = (h[:-1] * h[1:]).sum()
    saved = _saved_tensors(y)
    return [sum(t.numel() * t.element_size() for t in saved), _pinned(saved)]

# %%
tk.check("ex03")
