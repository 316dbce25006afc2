# expect: q1=full q2=full
# why: both answers are lambdas assigned to the names (correct formulas), not def statements
# ambiguous: 'graded from their definitions (imports, def, class, literal values)': a lambda bound by assignment is a function but neither a def nor a literal

# %%
import torch

import tracekit as tk

# %%
elt = {torch.float32: 4, torch.float64: 8}
pinned_bytes = lambda n, k, dtype: n * n * elt[dtype]  # noqa: E731

# %%
visible_and_pinned = lambda n, dtype: [2 * (n - 1) * elt[dtype] + 8, n * elt[dtype] + 8]  # noqa: E731

# %%
tk.check("ex03")
