# expect: q1=full q2=full
# why: q1 measured in the notebook with a counting hook on the ten programs; q2 offloads every save to its own file (uuid name in a temp folder, torch.save of t.detach()), unpack torch.loads it (any number of times), and weakref.finalize on the handle removes the file when the graph drops it; memory holds only the handles
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
def _count_packs(build):
    calls = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: calls.append(1) or t, lambda t: t):
        build()
    return len(calls)


def _programs():
    def vec(grad):
        return torch.randn(5, requires_grad=grad)
    a, b = vec(True), vec(False)
    a2, b2 = vec(True), vec(True)
    x, W = torch.randn(2, 3), torch.randn(3, 4, requires_grad=True)
    b3 = vec(True)
    return {
        "H1": lambda: (a.sin() * a.cos()).sum(),
        "H2": lambda: a.exp().sum(),
        "H3": lambda: (a * b).sum(),
        "H4": lambda: (a2 + b2).sum(),
        "H5": lambda: a.sigmoid().tanh().sum(),
        "H6": lambda: (a2.exp() * b2).sum(),
        "H7": lambda: (x @ W).relu().sum(),
        "H8": lambda: (b / b3).sum(),
        "H9": lambda: a.pow(3).sum(),
        "H10": lambda: (a.relu() * 2).sum(),
    }


q1_pack_calls = {pid: _count_packs(build) for pid, build in _programs().items()}

# %%
import os
import tempfile
import uuid
import weakref

_folder = tempfile.mkdtemp(prefix="ex07_offload_")


class OnDisk:
    __slots__ = ("path", "__weakref__")

    def __init__(self, path):
        self.path = path


def pack(t):
    path = os.path.join(_folder, uuid.uuid4().hex + ".pt")
    torch.save(t.detach(), path)
    handle = OnDisk(path)
    weakref.finalize(handle, os.remove, path)  # the file goes with the graph
    return handle

def unpack(handle):
    return torch.load(handle.path, weights_only=True)

hooks = (pack, unpack)

# %%
tk.check("ex07")
