"""Traces without data (meta or fake tensors: shapes and bytes, no values): which backend a trace
ran on, the nodes where that backend runs another kernel than a real device would (a note on
the node says so, see DIVERGENCES), and the refusal to observe a backward that has no values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .errors import NotObservableError
from .reader import Node, TraceData
from .storage import has_data

SDPA_NOTE = (
    "meta ran scaled_dot_product_attention's math path (bmm, _safe_softmax: the attention "
    "matrix is saved); a real device may pick a fused kernel instead (cpu: flash attention when "
    "there is no dropout; cuda: flash or memory-efficient), which saves query, key, value, output "
    "and logsumexp. To predict the device's choice, trace under FakeTensorMode on that device."
)
RNN_NOTE = (
    "meta ran this recurrent layer step by step (one cell per time step); on cpu PyTorch runs "
    "oneDNN's fused layer (MkldnnRnnLayerBackward0, with a workspace), on cuda cuDNN's. To "
    "predict the device's choice, trace under FakeTensorMode on that device."
)
RNN_WORKSPACE_NOTE = (
    "fake tensors cannot size oneDNN's RNN workspace: it shows 0 bytes here, the real one is larger."
)
LAYER_NORM_NOTE = (
    "meta keeps layer_norm's mean and rstd in float32 for a 16-bit input; the cpu kernel keeps "
    "them in the input's dtype (half the bytes). To predict a device's choice, trace under "
    "FakeTensorMode on that device."
)
_RNN_CALLS = frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu"})


@dataclass(frozen=True)
class Divergence:
    """A place where a trace without data differs from the real device's trace."""

    backend: str  # "meta" or "fake"
    matches: Callable[[Node], bool]
    note: str


DIVERGENCES: list[Divergence] = [
    Divergence("meta", lambda n: n.name == "SafeSoftmaxBackward0" or n.call == "scaled_dot_product_attention",
               SDPA_NOTE),
    Divergence("meta", lambda n: n.call in _RNN_CALLS, RNN_NOTE),
    Divergence("meta", lambda n: n.name == "NativeLayerNormBackward0" and _stats_widened(n), LAYER_NORM_NOTE),
    Divergence("fake", lambda n: n.name == "MkldnnRnnLayerBackward0" and any(r.nbytes == 0 for r in n.residuals),
               RNN_WORKSPACE_NOTE),
]


def _stats_widened(node: Node) -> bool:
    """A layer_norm whose input is 16-bit but whose saved mean/rstd are float32."""
    dtypes = {r.slot: r.dtype for r in node.residuals}
    return dtypes.get("input") in ("bfloat16", "float16") and dtypes.get("result1") == "float32"


def backend_of(t: torch.Tensor) -> str | None:
    """'meta' or 'fake' for a tensor without data, None for a real one."""
    if has_data(t):
        return None
    return "meta" if t.device.type == "meta" else "fake"


def backend_of_outputs(outputs: tuple[torch.Tensor, ...]) -> str | None:
    """'meta' or 'fake' if the traced outputs carry no data, else None."""
    return next((b for b in map(backend_of, outputs) if b is not None), None)


def note_for(node: Node, backend: str | None) -> str | None:
    """Where the meta (or fake) backend ran `node` differently than a real device would, what to know."""
    if backend is None:
        return None
    return next((d.note for d in DIVERGENCES if d.backend == backend and d.matches(node)), None)


def refuse_without_data(trace: TraceData) -> None:
    """Raise NotObservableError for a trace of meta / fake tensors: there is nothing to observe."""
    if trace.without_data:
        raise NotObservableError(
            f"this trace holds {trace.without_data} tensors: they have shapes but no values and no "
            "memory, so backward cannot be observed (no free point or byte would be real). Use "
            "trace.predict_backward() for the free points predicted from the graph's structure, "
            "or build a smaller model on a real device and trace that."
        )
