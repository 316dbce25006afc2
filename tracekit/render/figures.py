"""Matplotlib figures for scenario results and budgets: pictures where a table reads worse."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..results import ScenarioResult

KIB = 1024


def _figure(width: float = 7, height: float = 3.2) -> tuple[Any, Any]:
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


def recompute_figure(result: ScenarioResult) -> Any:
    """Peak memory and time of each recompute variant, relative to plain backward."""
    rows = result.values["rows"]
    names = list(rows)
    base = rows[names[0]]
    fig, ax = _figure()
    pos = range(len(names))
    ax.barh([p + 0.2 for p in pos], [rows[n]["peak"] / base["peak"] for n in names], height=0.4, label="peak memory")
    ax.barh([p - 0.2 for p in pos], [rows[n]["seconds"] / base["seconds"] for n in names], height=0.4, label="time")
    ax.set_yticks(list(pos), names)
    ax.axvline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("relative to plain backward (measured)")
    ax.set_title(f"recompute on {result.device}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def offload_figure(result: ScenarioResult) -> Any:
    """Bytes the graph keeps on the device after forward, per hook setting."""
    rows = result.values["rows"]
    names = list(rows)
    fig, ax = _figure()
    ax.barh(names, [rows[n]["device_bytes"] / KIB for n in names], label=f"{result.device} (measured)")
    if result.device.startswith("cuda"):
        ax.barh(names, [(rows[n]["host_bytes_trace"] or 0) / KIB for n in names], left=[rows[n]["device_bytes"] / KIB
                for n in names], label="host (trace)")
    ax.set_xlabel("KiB held after forward")
    ax.set_title(f"saved-tensor hooks on {result.device}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def references_figure(result: ScenarioResult) -> Any:
    """Live bytes after each training iteration, per way of keeping the diagnostic."""
    fig, ax = _figure()
    for label, r in result.values["rows"].items():
        ax.plot(range(len(r["live"])), [b / KIB for b in r["live"]], marker="o", label=label)
    ax.set_xlabel("iteration")
    ax.set_ylabel("live KiB (measured)")
    ax.set_title(f"application references on {result.device}")
    ax.legend()
    fig.tight_layout()
    return fig


def storage_figure(result: ScenarioResult) -> Any:
    """Naive sum of shapes, storage truth and measured bytes, for the slice and the shared views."""
    v = result.values
    fig, ax = _figure()
    groups = ["slice of a big tensor", "views of one tensor"]
    series = {
        "sum of shapes": [v["slice_visible"], v["views_naive"]],
        "storage truth": [v["slice_pinned"], v["views_storage_truth"]],
        "measured": [v["slice_measured"], v["views_measured"]],
    }
    for i, (name, vals) in enumerate(series.items()):
        ax.bar([g + (i - 1) * 0.27 for g in range(2)], [b / KIB for b in vals], width=0.27, label=name)
    ax.set_xticks(range(2), groups)
    ax.set_yscale("log")
    ax.set_ylabel("KiB (log scale)")
    ax.set_title(f"what the graph really pins, on {result.device}")
    ax.legend()
    fig.tight_layout()
    return fig


def _unit(n: int) -> tuple[int, str]:
    return (1 << 20, "MiB") if n >= 1 << 20 else (KIB, "KiB")


def budget_figure(budget: Any) -> Any:
    """The measured allocations of one step stacked by category, the phases, and the peak where it happened."""
    from ..memory_budget import _RULE, ALLOCATED

    fig, ax = _figure(10, 4.4)
    how = "predicted" if budget.device == "meta" else "measured"
    scale, unit = _unit(max(budget.peak, budget.naive_sum))
    xs = list(range(len(budget.live)))
    colors = {"parameters": "#4c72b0", "gradients": "#dd8452", "optimizer state": "#55a868",
              "saved activations": "#c44e52", "application references": "#8172b3",
              "temporary workspaces": "#ccb974", "unattributed": "#b0b0b0"}
    polys = ax.stackplot(xs, *[[b / scale for b in budget.series[c]] for c in ALLOCATED], labels=ALLOCATED,
                         colors=[colors[c] for c in ALLOCATED], alpha=0.85, step="post")
    polys[ALLOCATED.index("unattributed")].set_hatch("//")
    ax.step(xs, [b / scale for b in budget.live], where="post", color="black", lw=1, label=f"{how} allocated")
    reserve = budget.series.get("allocator reserve")
    if reserve and any(reserve):
        ax.step(xs, [(a + r) / scale for a, r in zip(budget.live, reserve)], where="post", color="black", lw=0.8,
                ls="--", label="reserved (allocated + allocator reserve)")
    phases: dict[int, list[str]] = {}
    for m in budget.timeline:
        if m.peak and m.label.startswith("peak"):
            continue
        if _RULE.search(m.label):
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
    ax.annotate(f"peak {budget.peak / scale:.2f} {unit}, {phase}", (peak.position, budget.peak / scale),
                color="red", fontsize=8, textcoords="offset points", xytext=(8 if where == "left" else -8, 8),
                ha=where, bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85})
    ax.axhline(budget.naive_sum / scale, color="gray", ls=":", lw=1)
    ax.annotate(f"naive sum of category peaks {budget.naive_sum / scale:.2f} {unit} (no moment reaches it)",
                (0, budget.naive_sum / scale), color="gray", textcoords="offset points", xytext=(4, 3), fontsize=8)
    ax.set_ylim(0, max(budget.naive_sum, budget.peak + max(reserve or [0])) / scale * 1.12)
    ax.set_xlim(0, max(xs[-1], 1))
    ax.set_ylabel(f"{unit} on {budget.device}")
    ax.set_xlabel("the step's allocations and frees, in order (dotted: each reverse rule)", fontsize=8)
    ax.set_title(f"one training step on {budget.device}: every byte {how}, named by who holds it", pad=16)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig
