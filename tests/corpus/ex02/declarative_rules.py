# expect: q1=full q2=full q3=full
# why: each program described as its backward chain with what each rule saves (a small table) and helper functions derive all three answers; slot sets given as sorted lists

# %%
import torch  # noqa: F401 - for your answers

import tracekit as tk

# %%
# per program, in backward order: (node, {slot: what it is}); "a"/"b" are tensors I hold, others are intermediates
CHAINS = {
    "P1": [("SumBackward0", {}), ("MulBackward0", {"self": "e", "other": "b"}), ("ExpBackward0", {"result": "e"})],
    "P2": [("SumBackward0", {}), ("MulBackward0", {"other": "b"}), ("SinBackward0", {"self": "a"})],
    "P3": [("SumBackward0", {}), ("DivBackward0", {"self": "t", "other": "b"}), ("TanhBackward0", {"result": "t"})],
    "P4": [("SumBackward0", {}), ("ExpBackward0", {"result": "e"}), ("MulBackward0", {"self": "a", "other": "b"})],
    "P5": [("SumBackward0", {}), ("MulBackward0", {"self": "s", "other": "a"}), ("SigmoidBackward0", {"result": "s"})],
    "P6": [("SumBackward0", {}), ("AddBackward0", {}), ("ExpBackward0", {"result": "e"}), ("CosBackward0", {"self": "a"})],
    "P7": [("SumBackward0", {}), ("SigmoidBackward0", {"result": "s"}), ("MulBackward0", {"other": "three"})],
    "P8": [("SumBackward0", {}), ("MulBackward0", {"self": "e"}), ("SinBackward0", {"self": "b"})],
}
HELD = {"a", "b"}


def order(pid):
    return [node for node, _ in CHAINS[pid]]


q1_order = {pid: order(pid) for pid in CHAINS}

# %%
def reads(pid):
    return {node: sorted(slots) for node, slots in CHAINS[pid]}


q2_reads = {pid: reads(pid) for pid in CHAINS}

# %%
def freed(pid):
    last_use = {}
    for step, (_, slots) in enumerate(CHAINS[pid]):
        for value in slots.values():
            last_use[value] = step
    return {f"{node}.{slot}": (None if value in HELD else last_use[value])
            for node, slots in CHAINS[pid] for slot, value in slots.items()}


q3_freed = {pid: freed(pid) for pid in CHAINS}

# %%
tk.check("ex02")
