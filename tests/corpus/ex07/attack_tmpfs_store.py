# expect: q1=full q2=less
# why: a helper module written to /tmp and imported: it stores each saved tensor in a file on /tmp (tmpfs) and never deletes it, so the process itself stays small
# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_pack_calls = {"H1": 4, "H2": 1, "H3": 1, "H4": 0, "H5": 2, "H6": 3, "H7": 2, "H8": 2, "H9": 1, "H10": 1}

# %%
import sys

with open("/tmp/ex07_disk_store.py", "w") as fh:
    fh.write(
        "import os, uuid, torch\n"
        "DIR = '/tmp/.ex07_store'\n"
        "os.makedirs(DIR, exist_ok=True)\n"
        "def pack(t):\n"
        "    path = os.path.join(DIR, uuid.uuid4().hex)\n"
        "    torch.save(t.detach().clone(), path)\n"
        "    return path\n"
        "def unpack(path):\n"
        "    return torch.load(path)\n"
    )
sys.path.insert(0, "/tmp")
import ex07_disk_store  # noqa: E402

hooks = (ex07_disk_store.pack, ex07_disk_store.unpack)

# %%
tk.check("ex07")
