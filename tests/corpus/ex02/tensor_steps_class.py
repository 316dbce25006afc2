# expect: q1=full q2=full q3=full
# why: a small class per program builds the answers; freed steps are 0-dim torch tensors; uses OrderedDict and dict comprehensions

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
from collections import OrderedDict


class Prog:
    """One program's backward chain: rules in reverse order and the saved values each reads."""

    def __init__(self, rules, shared=(), held=()):
        self.rules = OrderedDict(rules)  # node -> slots, in backward order
        self.shared = dict(shared)  # 'Node.slot' -> the other 'Node.slot' with the same memory
        self.held = set(held)  # 'Node.slot' values that are a or b

    def freed(self):
        steps = {f"{n}.{s}": i for i, (n, slots) in enumerate(self.rules.items()) for s in slots}
        out = {}
        for key, step in steps.items():
            if key in self.held:
                out[key] = None
            else:
                out[key] = torch.tensor(max(step, steps.get(self.shared.get(key), -1)))
        return out


S, M, E = "SumBackward0", "MulBackward0", "ExpBackward0"
PROGS = {
    "P1": Prog([(S, []), (M, ["self", "other"]), (E, ["result"])],
               {"MulBackward0.self": "ExpBackward0.result", "ExpBackward0.result": "MulBackward0.self"},
               ["MulBackward0.other"]),
    "P2": Prog([(S, []), (M, ["other"]), ("SinBackward0", ["self"])], (),
               ["MulBackward0.other", "SinBackward0.self"]),
    "P3": Prog([(S, []), ("DivBackward0", ["self", "other"]), ("TanhBackward0", ["result"])],
               {"DivBackward0.self": "TanhBackward0.result", "TanhBackward0.result": "DivBackward0.self"},
               ["DivBackward0.other"]),
    "P4": Prog([(S, []), (E, ["result"]), (M, ["self", "other"])], (), ["MulBackward0.self", "MulBackward0.other"]),
    "P5": Prog([(S, []), (M, ["self", "other"]), ("SigmoidBackward0", ["result"])],
               {"MulBackward0.self": "SigmoidBackward0.result", "SigmoidBackward0.result": "MulBackward0.self"},
               ["MulBackward0.other"]),
    "P6": Prog([(S, []), ("AddBackward0", []), (E, ["result"]), ("CosBackward0", ["self"])], (),
               ["CosBackward0.self"]),
    "P7": Prog([(S, []), ("SigmoidBackward0", ["result"]), (M, ["other"])]),
    "P8": Prog([(S, []), (M, ["self"]), ("SinBackward0", ["self"])], (), ["SinBackward0.self"]),
}
q1_order = {pid: list(p.rules) for pid, p in PROGS.items()}

# %%
q2_reads = {pid: {node: set(slots) for node, slots in p.rules.items()} for pid, p in PROGS.items()}

# %%
q3_freed = {pid: p.freed() for pid, p in PROGS.items()}

# %%
tk.check("ex02")
