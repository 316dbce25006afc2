# expect: q1=full q2=full
# why: computes the right number by running torch.optim.Adam on a deep copy and summing its state, which the prompt forbids ('without running an optimizer')
# prompt revised after this variant was written: running Adam on a copy is allowed (it cannot be told apart from outside); the writer's 'zero' was right for the old prompt

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
q1_largest = {
    "C1": "optimizer state",  # 0.53 M params: Adam's 2 copies (4 MiB) beat params, and batch 16 saves little
    "C2": "saved activations",  # 4096 x 64 x 4 B per layer, 4 layers; tiny parameters, SGD keeps no state
    "C3": "saved activations",  # 2048 x 128 x 4 B = 1 MiB per layer, 6 layers vs 0.8 MiB of Adam state
    "C4": "application references",  # the 4096 x 1024 input batch (16 MiB) is held by my code
    "C5": "saved activations",  # 1 MiB per layer, 8 layers vs 1.8 MiB of parameters
    "C6": "application references",  # the 2048 x 2048 input batch (16 MiB); the model is tiny
}

# %%
import copy


def adam_state_bytes(model):
    clone = copy.deepcopy(model)
    opt = torch.optim.Adam(clone.parameters())
    for p in clone.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    return sum(t.nbytes for state in opt.state.values() for t in state.values())

# %%
tk.check("ex09")
