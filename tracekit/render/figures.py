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


def budget_figure(budget: Any) -> Any:
    """Stacked categories at each moment of the step, the measured live bytes, the peak marked."""
    from ..memory_budget import CATEGORIES

    fig, ax = _figure(9, 4)
    xs = list(range(len(budget.timeline)))
    stacks = [[m.bytes.get(c, 0) / KIB for m in budget.timeline] for c in CATEGORIES]
    ax.stackplot(xs, *stacks, labels=CATEGORIES, alpha=0.85, step="mid")
    ax.plot(xs, [m.live / KIB for m in budget.timeline], color="black", lw=1, marker=".", label="measured allocated")
    peak_x = next(i for i, m in enumerate(budget.timeline) if m.label == budget.peak_moment)
    ax.axhline(budget.peak / KIB, color="red", ls="--", lw=1)
    ax.annotate(f"peak {budget.peak / KIB:.0f} KiB", (peak_x, budget.peak / KIB), color="red",
                textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axhline(budget.naive_sum / KIB, color="gray", ls=":", lw=1)
    ax.annotate(f"naive sum of category peaks {budget.naive_sum / KIB:.0f} KiB", (0, budget.naive_sum / KIB),
                color="gray", textcoords="offset points", xytext=(4, 4), fontsize=8)
    ticks = [i for i, m in enumerate(budget.timeline) if not m.label.startswith("backward step") or i == peak_x]
    ax.set_xticks(ticks, [budget.timeline[i].label.split(":")[0] for i in ticks], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("KiB")
    ax.set_title(f"one training step on {budget.device}")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig
