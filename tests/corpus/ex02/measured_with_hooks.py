# expect: q1=full q2=full q3=full
# why: all three tables measured in the notebook with plain PyTorch: node pre-hooks record the real reverse order, _saved_* attributes give the slots, storages shared with a/b/y are held

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
PROGRAMS = {
    "P1": (lambda a, b: (a.exp() * b).sum(), "ab"),
    "P2": (lambda a, b: (a.sin() * b).sum(), "a"),
    "P3": (lambda a, b: (a.tanh() / b).sum(), "ab"),
    "P4": (lambda a, b: (a * b).exp().sum(), "ab"),
    "P5": (lambda a, b: (a.sigmoid() * a).sum(), "a"),
    "P6": (lambda a, b: (a.cos() + b.exp()).sum(), "ab"),
    "P7": (lambda a, b: (a * 3).sigmoid().sum(), "a"),
    "P8": (lambda a, b: (a.exp() * b.sin()).sum(), "b"),
}


def run_program(pid):
    """Run one program; return (reverse order, {node: slots}, {'Node.slot': freed step or None})."""
    fn, who = PROGRAMS[pid]
    a = (torch.rand(4) + 0.5).requires_grad_("a" in who)
    b = (torch.rand(4) + 0.5).requires_grad_("b" in who)
    y = fn(a, b)
    nodes, todo = [], [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in nodes or type(node).__name__ == "AccumulateGrad":
            continue
        nodes.append(node)
        todo.extend(nxt for nxt, _ in node.next_functions)
    saved = {}
    for node in nodes:
        for attr in dir(node):
            if attr.startswith("_saved_") and isinstance(getattr(node, attr), torch.Tensor):
                saved[(node, attr[7:])] = getattr(node, attr).untyped_storage().data_ptr()
    held = {t.untyped_storage().data_ptr() for t in (a, b, y)}
    order = []
    for node in nodes:
        node.register_prehook(lambda grads, node=node: order.append(node))
    y.backward()
    names = [n.name() for n in order]
    reads = {n.name(): {slot for (m, slot) in saved if m is n} for n in order}
    freed = {}
    for (node, slot), ptr in saved.items():
        users = [order.index(m) for (m, _), p in saved.items() if p == ptr]
        freed[f"{node.name()}.{slot}"] = None if ptr in held else max(users)
    return names, reads, freed


_results = {pid: run_program(pid) for pid in PROGRAMS}
q1_order = {pid: r[0] for pid, r in _results.items()}

# %%
q2_reads = {pid: r[1] for pid, r in _results.items()}

# %%
q3_freed = {pid: r[2] for pid, r in _results.items()}

# %%
tk.check("ex02")
