# expect: q1=full q2=full
# why: q1 built from a helper; q2 the diagonal of torch.autograd.functional.hessian of sum f (f elementwise, so the diagonal is f'')
# %%
import torch

import tracekit as tk

# %%
def _s(*names):
    return set(names)


q1_needs = dict(
    R1=_s("MulBackward0.other"), R2=_s(), R3=_s("MulBackward0.other"), R4=_s("MulBackward0.self"),
    R5=_s("ExpBackward0.result"), R6=_s("PowBackward0.self"), R7=_s("MmBackward0.mat2"),
    R8=_s("ReluBackward0.result"), R9=_s(),
    R10=_s("TanhBackward0.result", "ExpBackward0.result", "MulBackward0.self", "MulBackward0.other"),
)

# %%
def second_derivative(f, x):
    n = x.numel()
    hess = torch.autograd.functional.hessian(lambda t: f(t.reshape(x.shape)).sum(), x.detach().reshape(-1))
    return hess.reshape(n, n).diagonal().reshape(x.shape).clone()

# %%
tk.check("ex04")
