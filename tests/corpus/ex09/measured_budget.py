# expect: q1=full q2=full
# why: q1 measured for all six setups with tk.budget in the notebook (max of at_peak); q2 from model.modules() Linear weights and optional biases

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
SETUPS = {"C1": (512, 512, 2, 16, "Adam"), "C2": (64, 64, 4, 4096, "SGD"), "C3": (128, 128, 6, 2048, "Adam"),
          "C4": (1024, 16, 2, 4096, "SGD"), "C5": (64, 256, 8, 1024, "SGD"), "C6": (2048, 8, 1, 2048, "Adam")}


def build(d_in, width, layers):
    mods = [torch.nn.Linear(d_in, width), torch.nn.ReLU()]
    for _ in range(layers - 1):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))


def largest(d_in, width, layers, batch, opt):
    model = build(d_in, width, layers)
    optimizer = torch.optim.Adam(model.parameters()) if opt == "Adam" else torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(batch, d_in), torch.randint(0, 10, (batch,))
    at_peak = tk.budget(model, optimizer, (x, y), torch.nn.functional.cross_entropy).at_peak
    return max(at_peak, key=at_peak.get)


q1_largest = {cid: largest(*setup) for cid, setup in SETUPS.items()}

# %%
def adam_state_bytes(model):
    total = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            for t in (m.weight, m.bias):
                if t is not None:
                    total += 2 * t.nbytes + torch.tensor(0.0).nbytes
    return total

# %%
tk.check("ex09")
