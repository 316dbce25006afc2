"""Matplotlib figure helpers (a figure and axes, byte units) and the training-step budget figure.
Each scenario draws its own figure in its module under `tracekit/scenarios/`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

KIB = 1024


def figure_and_axes(width: float = 7, height: float = 3.2) -> tuple[Any, Any]:
    """A matplotlib figure with one axes, not shown (inline backend in notebooks, Agg elsewhere)."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        try:
            import IPython  # noqa: F401 - inline backend in notebooks, Agg elsewhere
        except ImportError:
            matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    plt.close(fig)  # returned, not shown twice
    return fig, ax


def unit(n: int) -> tuple[int, str]:
    """The bytes per unit and its name to show n bytes in: MiB from 1 MiB up, else KiB."""
    return (1 << 20, "MiB") if n >= 1 << 20 else (KIB, "KiB")


def budget_figure(budget: Any, categories: Sequence[str], rule: re.Pattern[str]) -> Any:
    """The measured allocations of one step stacked by `categories` (in that order; each a key of
    budget.series), the phases, and the peak where it happened; marks whose label `rule` finds
    are single reverse rules, drawn as dotted lines."""
    fig, ax = figure_and_axes(10, 4.4)
    how = "predicted" if budget.device == "meta" else "measured"
    scale, unit_name = unit(max(budget.peak, budget.naive_sum))
    xs = list(range(len(budget.live)))
    colors = {"parameters": "#4c72b0", "gradients": "#dd8452", "optimizer state": "#55a868",
              "saved activations": "#c44e52", "application references": "#8172b3",
              "temporary workspaces": "#ccb974", "unattributed": "#b0b0b0"}
    polys = ax.stackplot(xs, *[[b / scale for b in budget.series[c]] for c in categories], labels=categories,
                         colors=[colors[c] for c in categories], alpha=0.85, step="post")
    if "unattributed" in categories:
        polys[list(categories).index("unattributed")].set_hatch("//")
    ax.step(xs, [b / scale for b in budget.live], where="post", color="black", lw=1, label=f"{how} allocated")
    reserve = budget.series.get("allocator reserve")
    if reserve and any(reserve):
        ax.step(xs, [(a + r) / scale for a, r in zip(budget.live, reserve)], where="post", color="black", lw=0.8,
                ls="--", label="reserved (allocated + allocator reserve)")
    phases: dict[int, list[str]] = {}
    for m in budget.timeline:
        if m.peak and m.label.startswith("peak"):
            continue
        if rule.search(m.label):
            ax.axvline(m.position, color="gray", lw=0.4, ls=":", zorder=0)
        else:
            phases.setdefault(m.position, []).append(m.label)
            ax.axvline(m.position, color="gray", lw=0.8, zorder=0)
    names = {"after zero_grad": "zero_grad", "after forward": "forward", "after backward": "backward",
             "after optimizer step": "optimizer.step()"}
    marks = sorted((p, label) for p, labels in phases.items() for label in labels)
    above = ax.get_xaxis_transform()  # x in data, y in axes fractions: just above the plot
    for (a, _), (b, label) in zip(marks, marks[1:]):  # name each phase over its stretch of the stream
        name = next((v for k, v in names.items() if label.endswith(k)), None)
        if name and b - a >= 0.04 * max(len(xs) - 1, 1):
            ax.text((a + b) / 2, 1.01, name, transform=above, ha="center", va="bottom", fontsize=7, color="dimgray")
    ticks: list[tuple[int, list[str]]] = []
    for pos, labels in sorted(phases.items()):  # phases closer than 3% of the width share one tick
        if ticks and pos - ticks[-1][0] < 0.03 * max(len(xs) - 1, 1):
            ticks[-1][1].extend(labels)
        else:
            ticks.append((pos, list(labels)))
    ax.set_xticks([p for p, _ in ticks], [" / ".join(v) for _, v in ticks], rotation=30, ha="right", fontsize=7)
    peak = next(m for m in budget.timeline if m.peak)
    ax.axvline(peak.position, color="red", ls="--", lw=1)
    ax.plot([peak.position], [budget.peak / scale], "o", color="red", ms=5, zorder=5)
    where = "left" if peak.position < 0.6 * max(xs[-1], 1) else "right"
    phase = peak.label[len("peak, "):] if peak.label.startswith("peak, ") else f"at {peak.label}"
    ax.annotate(f"peak {budget.peak / scale:.2f} {unit_name}, {phase}", (peak.position, budget.peak / scale),
                color="red", fontsize=8, textcoords="offset points", xytext=(8 if where == "left" else -8, 8),
                ha=where, bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85})
    ax.axhline(budget.naive_sum / scale, color="gray", ls=":", lw=1)
    ax.annotate(f"naive sum of category peaks {budget.naive_sum / scale:.2f} {unit_name} (no moment reaches it)",
                (0, budget.naive_sum / scale), color="gray", textcoords="offset points", xytext=(4, 3), fontsize=8)
    ax.set_ylim(0, max(budget.naive_sum, budget.peak + max(reserve or [0])) / scale * 1.12)
    ax.set_xlim(0, max(xs[-1], 1))
    ax.set_ylabel(f"{unit_name} on {budget.device}")
    ax.set_xlabel("the step's allocations and frees, in order (dotted: each reverse rule)", fontsize=8)
    ax.set_title(f"one training step on {budget.device}: every byte {how}, named by who holds it", pad=16)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig
