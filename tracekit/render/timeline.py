"""Memory over the reverse pass: the bytes each residual's storage keeps alive as each reverse
step starts, predicted from the graph's structure (`Trace.predict_backward()`) and, after a
backward, observed: both read from a `Lifetimes` (lifetimes.py: each step's freed storages). Data first
(`memory_by_step`), the figure after (`timeline_figure`), as in PyTorch's `_memory_viz`.

A point k (0 ≤ k < steps) is "as step k starts"; the last point is "after backward". A storage
freed after step f is alive at points 0..f; one nothing frees stays alive to the end."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from ..reader import Storage, TraceData
from ..storage import format_bytes
from .figures import figure_and_axes, unit
from .prediction import predicted

NAMED = 8  # storages named in the legend; the rest are one band
HELD = "kept anyway (parameters, inputs, outputs, named variables)"
OTHER = "other residuals"
COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


@dataclass(frozen=True)
class Band:
    """One stacked band: a storage (or a group of them) and its bytes alive at each point."""

    label: str
    alive: tuple[int, ...]
    storages: int = 1


@dataclass(frozen=True)
class MemoryByStep:
    """Bytes alive per reverse step, one band per storage only the graph keeps (the largest named,
    the rest grouped), over one band of what is kept anyway."""

    kind: str  # "predicted" or "observed"
    steps: tuple[str, ...]  # the rule run at each step, e.g. `#12 NllLossBackward0`
    bands: tuple[Band, ...]  # bottom first: kept anyway, other residuals, then the named, smallest first
    freed: Mapping[Storage, int | None] = field(default_factory=dict, compare=False, repr=False)  # None: kept

    @property
    def total(self) -> tuple[int, ...]:
        """Bytes alive at each point (every band summed)."""
        return tuple(sum(b.alive[k] for b in self.bands) for k in range(len(self.steps) + 1))

    @property
    def peak(self) -> tuple[int, int]:
        """(point, bytes) of the most bytes alive, the first point it is reached."""
        total = self.total
        k = max(range(len(total)), key=lambda i: (total[i], -i))
        return k, total[k]


def _name(storage: Storage) -> str:
    first = storage.residuals[0]
    more = f" +{len(storage.residuals) - 1}" if len(storage.residuals) > 1 else ""
    module = f" in {first.node.module}" if first.node.module else ""
    return f"{first.label}{more}{module} · {format_bytes(storage.nbytes)}"


def alive_bytes(storages: Iterable[Storage], freed_at: Mapping[Storage, int | None], points: int) -> tuple[int, ...]:
    """The bytes of `storages` alive at each of `points` points, summed: a storage freed after step f
    counts at points 0..f, one nothing frees (None) at every point. One pass over the storages and
    one over the points (a change per storage where its bytes stop counting, then a running sum)."""
    change = [0] * points
    for s in storages:
        f = freed_at.get(s)
        change[0] += s.nbytes
        if f is not None and f + 1 < points:  # freed after step f: not counted from point f + 1 on
            change[f + 1] -= s.nbytes
    return tuple(accumulate(change))


def _bands(trace: TraceData, freed_at: Mapping[Storage, int | None], points: int) -> tuple[Band, ...]:
    owned = trace.graph_owned_storages()
    owned_set = set(owned)
    held = alive_bytes([s for s in trace.storages if s not in owned_set], freed_at, points)
    ranked = sorted(owned, key=lambda s: -s.nbytes)
    named, rest = ranked[:NAMED], ranked[NAMED:]
    bands = [Band(HELD, held, len(trace.storages) - len(owned))]
    if rest:
        bands.append(Band(f"{OTHER} ({len(rest)} storages)", alive_bytes(rest, freed_at, points), len(rest)))
    bands += [Band(_name(s), alive_bytes([s], freed_at, points)) for s in reversed(named)]
    return tuple(bands)


def memory_by_step(trace: TraceData, kind: str = "observed") -> MemoryByStep:
    """Bytes alive as each reverse step starts: `observed` (the backward that ran) or `predicted`
    (from the structure, with the same retain_graph as the observed one); read from the lifetimes."""
    lifetimes = trace.lifetimes()
    if kind != "observed" or lifetimes.predicted:
        lifetimes = predicted(trace, bool(trace.retained))
        kind = "predicted"
    storages = trace.storages
    freed: dict[Storage, int | None] = dict.fromkeys(storages)
    for k, gone in enumerate(lifetimes.freed):
        for j in gone:
            freed[storages[j]] = k
    nodes = trace.nodes
    steps = tuple(f"#{i} {nodes[i].name}" for i in lifetimes.order)
    return MemoryByStep(kind, steps, _bands(trace, freed, len(steps) + 1), freed)


def differences(predicted: MemoryByStep, observed: MemoryByStep) -> list[str]:
    """Each storage whose observed free step is not the predicted one, in words."""
    def when(f: int | None) -> str:
        return "kept" if f is None else f"freed after step {f}"

    return [f"{s.residuals[0].label}: predicted {when(predicted.freed.get(s))}, observed {when(f)}"
            for s, f in observed.freed.items() if s.residuals and predicted.freed.get(s) != f]


def timeline_figure(trace: TraceData) -> Any:
    """The figure: bytes alive per reverse step stacked by residual, predicted (and observed once
    backward ran), the peak marked; about 800 px wide."""
    series = [memory_by_step(trace, "predicted")]
    if not trace.lifetimes().predicted:
        series.append(memory_by_step(trace, "observed"))
    fig, _ = figure_and_axes(8.0, 2.4 * len(series) + 1.4)
    fig.clf()
    axes = list(fig.subplots(len(series), 1, sharex=True, squeeze=False)[:, 0])
    top = max(max(m.total) for m in series) or 1
    scale, unit_name = unit(top)
    for ax, m in zip(axes, series):
        xs = list(range(len(m.steps) + 1))
        colours = ["#dddddd"] + (["#b0b0b0"] if any(b.label.startswith(OTHER) for b in m.bands) else [])
        colours += list(reversed(COLOURS[: len(m.bands) - len(colours)]))
        polys = ax.stackplot(xs, *[[v / scale for v in b.alive] for b in m.bands], labels=[b.label for b in m.bands],
                             colors=colours, step="post", alpha=0.9)
        polys[0].set_hatch("//")
        k, peak = m.peak
        ax.plot([k], [peak / scale], "o", color="red", ms=5, zorder=5)
        ax.annotate(f"peak {format_bytes(peak)}, {'before backward' if k == 0 else f'as step {k} starts'}",
                    (k, peak / scale), color="red", fontsize=8, textcoords="offset points", xytext=(8, -12),
                    bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85})
        ax.set_ylim(0, top / scale * 1.1)
        ax.set_xlim(0, len(xs))  # the last point, after backward, gets one step's width
        ax.set_ylabel(unit_name)
        ax.set_title(f"{m.kind}: bytes the residuals keep alive as each reverse step starts", fontsize=9, loc="left")
    if len(series) == 2:
        diff = differences(*series)
        axes[1].set_title(axes[1].get_title(loc="left") + (": as predicted, at every step" if not diff else
                          f": {len(diff)} storage{'s' if len(diff) > 1 else ''} not as predicted"),
                          fontsize=9, loc="left")
        if diff:
            more = f" (+{len(diff) - 2} more)" if len(diff) > 2 else ""
            axes[1].text(0.99, 0.96, "\n".join(diff[:2]) + more, transform=axes[1].transAxes, ha="right", va="top",
                         fontsize=7, color="#444444", bbox={"fc": "white", "ec": "none", "alpha": 0.85})
    last = axes[-1]
    n = len(series[-1].steps)
    last.set_xlabel(f"reverse step (0 … {n - 1}; {n}: after backward)", fontsize=8)
    handles, labels = last.get_legend_handles_labels()
    fig.legend(handles[::-1], labels[::-1], loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.suptitle(f"tracekit: {trace.summary()}", fontsize=8, x=0.01, ha="left")
    rows = (len(labels) + 1) // 2
    fig.tight_layout(rect=(0, (0.16 * rows + 0.15) / fig.get_size_inches()[1], 1, 0.97))
    return fig
