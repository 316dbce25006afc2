# expect: q1=full q2=full
# why: q1 computed in the notebook by running each program and walking grad_fn's tensor _saved_ attributes; q2 with grad_outputs=ones_like and a first-use import
# %%
import torch

import tracekit as tk

# %%
def _saved_names(y):
    names, seen, todo = set(), set(), [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for attr in dir(node):
            if attr.startswith("_saved_") and isinstance(getattr(node, attr), torch.Tensor):
                names.add(type(node).__name__ + "." + attr[len("_saved_"):])
        todo.extend(fn for fn, _ in node.next_functions)
    return names


def _vec(rg):
    return torch.randn(5, requires_grad=rg)


_programs = {
    "R1": lambda: (_vec(True) * 2).sum(),
    "R2": lambda: (_vec(True) + _vec(True)).sum(),
    "R3": lambda: (_vec(True) * _vec(False)).sum(),
    "R4": lambda: (_vec(False) * _vec(True)).sum(),
    "R5": lambda: _vec(True).exp().sum(),
    "R6": lambda: (_vec(True) - _vec(True)).pow(2).sum(),
    "R7": lambda: (torch.randn(2, 3, requires_grad=True) @ torch.randn(3, 4)).sum(),
    "R8": lambda: _vec(True).relu().mean(),
    "R9": lambda: (_vec(False).sin() + _vec(True)).sum(),
    "R10": lambda: (_vec(True).tanh() * _vec(True).exp()).sum(),
}
q1_needs = {k: _saved_names(p()) for k, p in _programs.items()}

# %%
def second_derivative(f, x):
    from torch.autograd import grad

    first = grad(f(x), x, grad_outputs=torch.ones_like(x), create_graph=True)[0]
    return grad(first, x, grad_outputs=torch.ones_like(first))[0]

# %%
tk.check("ex04")
