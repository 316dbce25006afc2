# expect: q1=full q2=full
# why: a Setup class estimates each category from sizes (params x 4 B, Adam 2x, one batch x width x 4 B per layer saved, the batch held) and picks the largest; q2 returns a numpy int64

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
class Setup:
    def __init__(self, d_in, width, layers, batch, adam):
        self.d_in, self.width, self.layers, self.batch, self.adam = d_in, width, layers, batch, adam

    def n_params(self):
        w = self.width
        return (self.d_in + 1) * w + (self.layers - 1) * (w + 1) * w + (w + 1) * 10

    def estimate(self):
        params = 4 * self.n_params()
        return {
            "parameters": params,
            "gradients": params,
            "optimizer state": 2 * params if self.adam else 0,
            "saved activations": 4 * self.batch * self.width * self.layers,
            "application references": 4 * self.batch * self.d_in + 8 * self.batch,
        }

    def largest(self):
        est = self.estimate()
        return max(est, key=est.get)


q1_largest = {
    "C1": Setup(512, 512, 2, 16, True).largest(),
    "C2": Setup(64, 64, 4, 4096, False).largest(),
    "C3": Setup(128, 128, 6, 2048, True).largest(),
    "C4": Setup(1024, 16, 2, 4096, False).largest(),
    "C5": Setup(64, 256, 8, 1024, False).largest(),
    "C6": Setup(2048, 8, 1, 2048, True).largest(),
}

# %%
import numpy as np


def adam_state_bytes(model):
    params = list(model.parameters())
    moments = np.int64(2) * sum(np.int64(p.numel() * p.element_size()) for p in params)
    steps = np.int64(len(params) * torch.empty((), dtype=torch.float32).element_size())
    return moments + steps

# %%
tk.check("ex09")
