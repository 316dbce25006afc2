# expect: q1=full q2=full
# why: the reorder fix: calls loss.backward() before the in-place update, as an optimizer step does; versions measured by running each program in the notebook

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def fixed(a):
    h = a * 2
    y = h.sin()
    loss = y.sum()
    loss.backward()  # sin's rule reads h now, at version 0
    h.add_(1)  # afterwards the in-place update is harmless
    return loss, h

# %%
PROGRAMS = {
    "V1": ("", "h.mul_(3); h.add_(1)"),
    "V2": ("h.add_(1)", "h.mul_(2)"),
    "V3": ("", "h[0].mul_(2)"),
    "V4": ("", "with torch.no_grad(): h.add_(1)"),
    "V5": ("", "h.detach().zero_()"),
    "V6": ("", "h.data.add_(1)"),
    "V7": ("h.add_(1); h.sub_(1)", "h.mul_(2); h.mul_(2); h.mul_(2)"),
    "V8": ("", "v = h[1:]; v.mul_(2); v.add_(1)"),
    "V9": ("h.exp_()", ""),
}


def versions(before, after):
    env = {"torch": torch, "a": torch.rand(4, requires_grad=True)}
    exec("h = a * 2", env)
    exec(before, env)
    exec("y = h.sin()", env)
    saved = env["h"]._version
    exec(after, env)
    return [saved, env["h"]._version]


q2_versions = {pid: versions(*code) for pid, code in PROGRAMS.items()}

# %%
tk.check("ex05")
