# expect: q1=zero q2=full
# why: q1 tries to measure with tk.budget but passes a made-up keyword, so the cell raises before q1_largest is set (intended); q2 right

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.Adam(model.parameters())
batch = (torch.randn(16, 512), torch.randint(0, 10, (16,)))
b = tk.budget(model, optimizer, batch, torch.nn.functional.cross_entropy, categories="all")
q1_largest = {"C1": max(b.at_peak, key=b.at_peak.get)}

# %%
def adam_state_bytes(model):
    # per parameter: exp_avg and exp_avg_sq (same shape and dtype), plus a 0-dim float32 'step' tensor
    total = 0
    for p in model.parameters():
        total += 2 * p.numel() * p.element_size() + 4
    return total

# %%
tk.check("ex09")
