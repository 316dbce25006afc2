"""The sigmoid-neuron lab: one neuron z = w·x − 0.5, y = σ(z), on the real PyTorch tape.

`SigmoidNeuron` is the logic (no widgets, unit-tested directly); `SigmoidLab` puts it
behind ipywidgets: inputs x and w, boxes for the student's predictions of z, y and dy/dx,
buttons Reset / Predict / Step and a Play timer. Predict asks first: it compares what the
student typed with the tape's values. Editing x or w keeps the current step.

The lab is a teaching view of one tiny graph, not memory evidence (see CAVEAT).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import torch

from .record import capture
from .render.table import HIGHLIGHT, html_table

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines

OFFSET = 0.5  # z = w·x − 0.5
START_X, START_W = 0.0, 0.0
CAVEAT = ("A teaching view, not memory evidence: one neuron of 4-byte scalars. It shows which saved "
          "value each reverse rule reads; Step and Play replay the recorded run, they do not measure "
          "memory. Memory evidence is storages and the allocator (lessons 3, 4 and 9).")
GUESSES = ("z", "y", "dy/dx")


@dataclass(frozen=True)
class LabStep:
    """One thing the lab can highlight: a forward op or a reverse rule."""

    lane: str  # "forward" or "reverse"
    title: str  # e.g. "#0 mul" or "step 0 · SigmoidBackward0"
    detail: str  # what it computes, with the real values
    reads: tuple[str, ...] = ()  # saved slots this reverse rule reads


class SigmoidNeuron:
    """The lab's state: inputs, whether both were set, the recorded run, the current step."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Back to the fixed start: x = w = 0, neither set, nothing computed."""
        self.x, self.w = START_X, START_W
        self.x_set = self.w_set = False
        self._clear()

    def _clear(self) -> None:
        self.steps: list[LabStep] = []
        self.position = 0  # how many steps are shown
        self.z = self.y = self.dydx = self.dydw = None
        self.saved: list[tuple[str, str, str]] = []  # (slot, value, which rule reads it)
        self.guesses: dict[str, float] = {}  # the student's predictions, compared once the tape ran
        self.message = ("type your predictions of z and y (dy/dx too if you like), then Predict; or Step"
                        if self.ready else "set both x and w, then predict z and y")

    def _edited(self) -> None:
        """An input changed: rerun the tape on the new values at the same step (edits keep t)."""
        position, had_run = self.position, bool(self.steps)
        self._clear()
        if had_run and self.ready:
            self.run()
            self.position = min(position, len(self.steps))

    def set_x(self, value: float) -> None:
        """Set the input x; a shown run is recomputed at the same step, old predictions are dropped."""
        self.x, self.x_set = float(value), True
        self._edited()

    def set_w(self, value: float) -> None:
        """Set the weight w; a shown run is recomputed at the same step, old predictions are dropped."""
        self.w, self.w_set = float(value), True
        self._edited()

    @property
    def ready(self) -> bool:
        """True once both x and w were set since the last reset."""
        return self.x_set and self.w_set

    @property
    def hand_dydx(self) -> float | None:
        """The paper formula dy/dx = w·σ(z)·(1 − σ(z)), from the real z."""
        if self.z is None:
            return None
        s = 1 / (1 + math.exp(-self.z))
        return self.w * s * (1 - s)

    def predict(self, z: float | None = None, y: float | None = None, dydx: float | None = None) -> bool:
        """Take the student's guesses, then run the tape and compare; False if inputs or guesses are missing."""
        if not self.ready:
            self.message = "set BOTH x and w first (Reset clears them)"
            return False
        guesses = {k: float(v) for k, v in zip(GUESSES, (z, y, dydx)) if v is not None}
        if not guesses:
            self.message = "type a prediction first (z, y or dy/dx), then press Predict"
            return False
        if not self.steps:
            self.run()
        self.guesses = guesses
        self.message = "; ".join(f"{k}: you {g:g}, tape {t:.4f}, off by {abs(g - t):.4f}"
                                 for k, g, t, _ in self.comparison())
        return True

    def comparison(self) -> list[tuple[str, float, float, float]]:
        """(quantity, the student's guess, the tape's value, the difference) for each guess made."""
        tape = {"z": self.z, "y": self.y, "dy/dx": self.dydx}
        return [(k, g, tape[k], g - tape[k]) for k, g in self.guesses.items() if tape[k] is not None]

    def run(self) -> bool:
        """Run the neuron on the real tape (forward, then an observed backward); False if not ready."""
        if not self.ready:
            self.message = "set BOTH x and w first (Reset clears them)"
            return False
        x = torch.tensor(self.x, requires_grad=True)
        w = torch.tensor(self.w, requires_grad=True)
        with capture() as cap:
            wx = w * x
            z = wx - OFFSET
            y = torch.sigmoid(z)
        tr = cap.trace(y)
        self.saved = [(f"{r.node.name}.{r.slot}", r.preview or "?", r.rule) for r in tr.residuals]
        tr.backward()
        self.z, self.y = z.item(), y.item()
        self.dydx, self.dydw = x.grad.item(), w.grad.item()
        names = {"self": "w", "other": "x"}  # w * x: PyTorch calls w `self` and x `other`
        self.steps = [
            LabStep("forward", "#0 mul", f"w·x = {self.w:g}·{self.x:g} = {wx.item():.4f}"),
            LabStep("forward", "#1 sub", f"z = w·x − 0.5 = {self.z:.4f}"),
            LabStep("forward", "#2 sigmoid", f"y = σ(z) = {self.y:.4f}"),
        ]
        for step in tr.steps:
            used = step.used
            if step.node.name == "SigmoidBackward0":
                detail = (f"reads its own output result = σ(z) = {used[0].preview}: "
                          f"grad_z = y·(1 − y) = {self.y * (1 - self.y):.4f}")
            elif step.node.name == "MulBackward0":
                grad_of = {"self": "x", "other": "w"}  # w (self) is read for dx, x (other) for dw
                parts = [f"{r.slot} = {names[r.slot]} = {r.preview} for d{grad_of[r.slot]}" for r in used]
                detail = f"reads {' and '.join(parts)}: dy/dx = {self.dydx:.4f}, dy/dw = {self.dydw:.4f}"
            else:
                detail = "reads no saved value: the gradient passes through unchanged"
            self.steps.append(LabStep("reverse", f"step {step.index} · {step.node.name}", detail,
                                      tuple(r.slot for r in used)))
        self.message = f"z = {self.z:.4f}, y = {self.y:.4f}"
        return True

    def step(self) -> LabStep | None:
        """Show one more step (running the tape first if needed); None when there is nothing to show."""
        if not self.steps and not self.run():
            return None
        if self.position < len(self.steps):
            self.position += 1
        return self.steps[self.position - 1]

    def text(self) -> str:
        """What the lab shows, as plain text."""
        unset = " (not set)"
        lines = [f"x = {self.x:g}{'' if self.x_set else unset}, w = {self.w:g}{'' if self.w_set else unset}"]
        if self.z is None:
            lines.append(self.message)
            lines.append(CAVEAT)
            return "\n".join(lines)
        for k, g, t, d in self.comparison():
            lines.append(f"your {k} = {g:g}   tape {k} = {t:.4f}   difference {d:+.4f}")
        lines.append(f"z = {self.z:.4f}   y = {self.y:.4f}")
        lines.append(f"dy/dx = {self.dydx:.4f} (tape)   w·σ(z)·(1 − σ(z)) = {self.hand_dydx:.4f} (paper)")
        lines.append("saved by the tape: " + "; ".join(f"{slot} = {value}" for slot, value, _ in self.saved))
        for i, s in enumerate(self.steps[: self.position]):
            mark = "→" if i == self.position - 1 else " "
            lines.append(f"{mark} {s.lane:<7} {s.title}: {s.detail}")
        lines.append(CAVEAT)
        return "\n".join(lines)


class SigmoidLab:
    """The widget: x and w inputs, Reset / Predict / Step buttons and Play, over a SigmoidNeuron."""

    def __init__(self, interval_ms: int = 900) -> None:
        import ipywidgets as widgets

        self.model = SigmoidNeuron()
        self.x = widgets.FloatText(value=START_X, description="x", layout=widgets.Layout(width="160px"))
        self.w = widgets.FloatText(value=START_W, description="w", layout=widgets.Layout(width="160px"))
        small = widgets.Layout(width="150px")
        self.guess = {k: widgets.Text(value="", placeholder="?", description=f"your {k}", layout=small)
                      for k in GUESSES}
        self.reset_button = widgets.Button(description="Reset")
        self.predict_button = widgets.Button(description="Predict", button_style="info")
        self.step_button = widgets.Button(description="Step", button_style="primary")
        self.play = widgets.Play(value=0, min=0, max=6, step=1, interval=interval_ms, description="Play")
        self.view = widgets.HTML()
        self._syncing = False
        self.x.observe(self._on_x, names="value")
        self.w.observe(self._on_w, names="value")
        self.reset_button.on_click(lambda _: self.reset())
        self.predict_button.on_click(lambda _: self._predict())
        self.step_button.on_click(lambda _: self._step())
        self.play.observe(self._on_play, names="value")
        controls = widgets.HBox([self.x, self.w, self.reset_button, self.step_button, self.play])
        guesses = widgets.HBox([*self.guess.values(), self.predict_button])
        self.widget = widgets.VBox([controls, guesses, self.view])
        self.widget.add_class("tracekit-lab")
        self._render()

    # events -----------------------------------------------------------------------------
    def _on_x(self, change: dict) -> None:
        if not self._syncing:
            self.model.set_x(change["new"])
            self._edited()

    def _on_w(self, change: dict) -> None:
        if not self._syncing:
            self.model.set_w(change["new"])
            self._edited()

    def _edited(self) -> None:
        """An input changed: the model kept its step; the old guesses no longer apply."""
        self._syncing = True
        for box in self.guess.values():
            box.value = ""
        self.play.value = self.model.position  # edits keep t
        self._syncing = False
        self._render()

    def _restart_play(self) -> None:
        self._syncing = True
        self.play.playing = False
        self.play.value = 0
        self._syncing = False

    def reset(self) -> None:
        """Back to the fixed start (x = w = 0, neither set)."""
        self.model.reset()
        self._syncing = True
        self.x.value, self.w.value = START_X, START_W
        for box in self.guess.values():
            box.value = ""
        self._syncing = False
        self._restart_play()
        self._render()

    def _predict(self) -> None:
        values: dict[str, float | None] = {}
        for k, box in self.guess.items():
            text = box.value.strip()
            try:
                values[k] = float(text) if text else None
            except ValueError:
                self.model.message = f"could not read your {k} {text!r} as a number"
                self._render()
                return
        self.model.predict(values["z"], values["y"], values["dy/dx"])
        self._render()

    def _step(self) -> None:
        self.model.step()
        self._render()

    def _on_play(self, change: dict) -> None:
        if self._syncing:
            return
        target = change["new"]
        if not self.model.steps and not self.model.run():
            self._render()
            return
        self.play.max = len(self.model.steps)
        while self.model.position < min(target, len(self.model.steps)):
            self.model.step()
        self._render()

    # drawing ------------------------------------------------------------------------------
    def _render(self) -> None:
        self.view.value = lab_html(self.model)

    def _repr_mimebundle_(self, **kwargs: object) -> dict:
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = self.model.text()
        return bundle

    def __repr__(self) -> str:
        return self.model.text()


def lab_html(m: SigmoidNeuron) -> str:
    """The lab's view: values, the tape's saved values (highlighted when read), the steps so far."""
    e = html.escape
    parts = ["<div class='tracekit-lab-view' style='font-family:sans-serif;font-size:13px'>"]
    caveat = f"<p class='lab-caveat' style='color:#555'><i>{e(CAVEAT)}</i></p>"
    if m.z is None:
        parts.append(f"<p class='lab-message'>{e(m.message)}</p>{caveat}</div>")
        return "".join(parts)
    if m.comparison():
        guesses = [(k, f"{g:g}", f"{t:.4f}", f"{d:+.4f}") for k, g, t, d in m.comparison()]
        parts.append(html_table(("", "you", "tape", "difference"), guesses, row_headers=True, css_class="lab-guesses"))
    parts.append(f"<p><b class='lab-z'>z = {m.z:.4f}</b> &nbsp; <b class='lab-y'>y = {m.y:.4f}</b> &nbsp; "
                 f"dy/dx = <span class='lab-dydx'>{m.dydx:.4f}</span> (tape) &nbsp; "
                 f"w·σ(z)·(1−σ(z)) = {m.hand_dydx:.4f} (paper)</p>")
    current = m.steps[m.position - 1] if m.position else None
    reads = set(current.reads) if current and current.lane == "reverse" else set()
    read = {i for i, (slot, _, _) in enumerate(m.saved) if slot.split(".")[-1] in reads
            and current is not None and slot.startswith(current.title.split(" · ")[-1])}
    parts.append(html_table(("saved value", "value", "read by"), m.saved, highlight=read))
    parts.append("<ol class='lab-steps'>")
    for i, s in enumerate(m.steps[: m.position]):
        style = f" style='background:{HIGHLIGHT}'" if i == m.position - 1 else ""
        parts.append(f"<li{style}><b>{e(s.lane)}</b> {e(s.title)}: {e(s.detail)}</li>")
    parts.append(f"</ol>{caveat}</div>")
    return "".join(parts)


def lab(interval_ms: int = 900) -> SigmoidLab:
    """The sigmoid-neuron lab widget (display it in Jupyter)."""
    return SigmoidLab(interval_ms)
