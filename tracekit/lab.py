"""The sigmoid-neuron lab: one neuron z = w·x − 0.5, y = σ(z), on the real PyTorch tape.

`SigmoidNeuron` is the logic (no widgets, unit-tested directly); `SigmoidLab` puts it
behind ipywidgets: inputs x and w, boxes for the student's predictions of z, y and dy/dx,
buttons Reset / Predict / Step and a Play timer. Predict asks first: it compares what the
student typed with the tape's values. Editing x or w keeps the current step. Every entry gets
an answer (`enter`, `predict_text`): 0 and negative numbers are values; the tape computes in
float32, so x and w are what float32 holds (the message says so when that differs from what was
typed), and what float32 cannot hold is refused with the reason and the value kept: not a number,
±inf, past ±3.4e38, below float32's smallest normal number (it would become 0 or a subnormal with
fewer digits), or a w·x that overflows.

The lab is a teaching view of one tiny graph, not memory evidence (see CAVEAT).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import torch

from .capture import capture
from .render.table import HIGHLIGHT, html_table

USER_LEVEL = True  # frames here run user-level programs: frames.py shows their source lines

OFFSET = 0.5  # z = w·x − 0.5
START_X, START_W = 0.0, 0.0
CAVEAT = ("A teaching view, not memory evidence: one neuron of 4-byte scalars. It shows which saved "
          "value each reverse rule reads; Step and Play replay the recorded run, they do not measure "
          "memory. Memory evidence is storages and the allocator (lessons 3, 4 and 9).")
GUESSES = ("z", "y", "dy/dx")
# the first line of the lab's text form: what a notebook shows when it is reopened (the widget's controls live in
# the kernel that made them) or where widgets cannot show
STUB_NOTE = ("[the lab's controls are not shown here: a reopened notebook keeps only this text. Run this cell "
             "(Shift+Enter) to get x, w, Predict, Step and Play back]")
FLOAT32_MAX = float(torch.finfo(torch.float32).max)  # the tape runs in float32
FLOAT32_TINY = float(torch.finfo(torch.float32).tiny)  # its smallest normal number (1.2e-38)


def read_number(name: str, text: str) -> tuple[float | None, str]:
    """A typed value as a finite float32-sized number, or None and a message that says what is wrong."""
    text = text.strip()
    if not text:
        return None, f"{name} is empty: type a number (0 and negative numbers are fine)"
    try:
        value = float(text)
    except ValueError:
        return None, f"could not read {name} {text!r} as a number"
    if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
        return None, f"{name} = {text} is not a finite float32 number: type a number between ±3.4e38"
    return value, ""


def as_float32(value: float) -> float:
    """The float32 number the tape computes with for `value`."""
    return torch.tensor(value, dtype=torch.float32).item()


def float32_text(value: float) -> str:
    """The shortest text that float32 reads back as the same number as `value` (0.1, not 0.10000000149)."""
    held = as_float32(value)
    for digits in range(1, 10):
        text = f"{held:.{digits}g}"
        if as_float32(float(text)) == held:
            return text
    return repr(held)


def read_input(name: str, text: str) -> tuple[float | None, str]:
    """A typed x or w as the float32 number the tape computes with, or None and what float32 cannot hold."""
    value, problem = read_number(name, text)
    if value is None:
        return None, problem
    if value != 0 and abs(value) < FLOAT32_TINY:
        held = as_float32(value)
        became = "0" if held == 0 else f"{float32_text(held)}, a subnormal number with fewer correct digits"
        return None, (f"{name} = {text.strip()} is too small for the float32 tape (it would compute with {became}): "
                      f"type 0, or a number of magnitude at least {FLOAT32_TINY:.2g}")
    return as_float32(value), ""


def _sigmoid(z: float) -> float:
    """σ(z) without overflow for large |z|."""
    if z >= 0:
        return 1 / (1 + math.exp(-z))
    e = math.exp(z)
    return e / (1 + e)


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
        self.x, self.x_set = as_float32(float(value)), True  # what the float32 tape computes with
        self._edited()

    def set_w(self, value: float) -> None:
        """Set the weight w; a shown run is recomputed at the same step, old predictions are dropped."""
        self.w, self.w_set = as_float32(float(value)), True
        self._edited()

    def enter(self, name: str, text: str) -> bool:
        """What typing `text` into the x or w box does: set it (any number float32 holds, 0 and negatives
        included) and say so, with the float32 value the tape computes with where that differs from what
        was typed; or keep the old value and say what is wrong; False if not set."""
        value, problem = read_input(name, text)
        if value is None:
            self.message = f"{problem}; {name} is still {self._shown(name)}"
            return False
        other, other_set = (self.w, self.w_set) if name == "x" else (self.x, self.x_set)
        if other_set and not math.isfinite(as_float32(value * other)):  # float32 w·x: the exact product, rounded
            partner = "w" if name == "x" else "x"
            self.message = (f"{name} = {text.strip()} with {partner} = {other:g} makes w·x overflow "
                            f"float32 (past ±3.4e38, the tape would compute with inf): type a smaller {name}; "
                            f"{name} is still {self._shown(name)}")
            return False
        (self.set_x if name == "x" else self.set_w)(value)
        shown = float32_text(value)
        held = "" if float(shown) == float(text) else f" (the float32 tape computes with {shown})"
        said = f"{name} = {text.strip()}{held}"
        missing = [k for k, done in (("x", self.x_set), ("w", self.w_set)) if not done]
        if missing:
            self.message = f"{said} set; now set {missing[0]} too"
        elif not self.steps:
            self.message = (f"{said} set; x = {self._shown('x')}, w = {self._shown('w')}: type your predictions "
                            "of z and y (dy/dx too if you like), then Predict; or Step")
        else:
            self.message = f"{said} set: the tape reran at the same step"
        return True

    def _shown(self, name: str) -> str:
        value, done = (self.x, self.x_set) if name == "x" else (self.w, self.w_set)
        return float32_text(value) if done else "not set"

    def predict_text(self, **typed: str) -> bool:
        """What Predict does with the boxes' text (keys z, y, dydx): every box that is not a number
        is named in the message; False if nothing was compared."""
        values: dict[str, float | None] = {}
        for key, text in typed.items():
            label = "dy/dx" if key == "dydx" else key
            if not text.strip():
                values[key] = None
                continue
            value, problem = read_number(f"your {label}", text)
            if value is None:
                self.message = problem + "; nothing was compared"
                return False
            values[key] = value
        return self.predict(values.get("z"), values.get("y"), values.get("dydx"))

    @property
    def ready(self) -> bool:
        """True once both x and w were set since the last reset."""
        return self.x_set and self.w_set

    @property
    def hand_dydx(self) -> float | None:
        """The paper formula dy/dx = w·σ(z)·(1 − σ(z)), from the real z."""
        if self.z is None:
            return None
        s = _sigmoid(self.z)
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
        bad = [k for k, g in guesses.items() if not math.isfinite(g)]
        if bad:
            self.message = f"your {bad[0]} is not a finite number; nothing was compared"
            return False
        if not self.steps:
            self.run()
        self.guesses = guesses
        self.message = f"your {', '.join(guesses)} compared with the tape's values below"
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
            LabStep("forward", "#0 mul", f"w·x = {self.w:g}·{self.x:g} = {wx.item() + 0.0:.4f}"),
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
        self.message = "the tape ran: Step (or Play) through its forward ops and reverse rules"
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
        lines = [f"x = {self._shown('x')}, w = {self._shown('w')}", self.message]
        if self.z is None:
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
        # Text, not FloatText: a number box drops what it cannot parse and never reports typing the
        # value it already holds (0), so every entry (Enter or leaving the box) reaches enter()
        box = widgets.Layout(width="160px")
        self.x = widgets.Text(value="", placeholder="type x", description="x", continuous_update=False, layout=box)
        self.w = widgets.Text(value="", placeholder="type w", description="w", continuous_update=False, layout=box)
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
        self._entered("x", change["new"])

    def _on_w(self, change: dict) -> None:
        self._entered("w", change["new"])

    def _entered(self, name: str, text: str) -> None:
        if self._syncing:
            return
        if self.model.enter(name, text):
            self._edited()
        else:
            self._render()

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
        """Back to the fixed start: empty boxes, neither x nor w set."""
        self.model.reset()
        self._syncing = True
        self.x.value = self.w.value = ""
        for box in self.guess.values():
            box.value = ""
        self._syncing = False
        self._restart_play()
        self._render()

    def _predict(self) -> None:
        self.model.predict_text(z=self.guess["z"].value, y=self.guess["y"].value, dydx=self.guess["dy/dx"].value)
        self._render()

    def _step(self) -> None:
        self.model.step()
        self._render()

    def _on_play(self, change: dict) -> None:
        if self._syncing:
            return
        target = change["new"]
        if not self.model.steps and not self.model.run():
            self._restart_play()  # nothing to play yet: the message says what is missing
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
        bundle["text/plain"] = f"{STUB_NOTE}\n{self.model.text()}"  # what a reopened notebook shows
        return bundle

    def __repr__(self) -> str:
        return self.model.text()


def lab_html(m: SigmoidNeuron) -> str:
    """The lab's view: values, the tape's saved values (highlighted when read), the steps so far."""
    e = html.escape
    parts = ["<div class='tracekit-lab-view' style='font-family:sans-serif;font-size:13px'>"]
    caveat = f"<p class='lab-caveat' style='color:#555'><i>{e(CAVEAT)}</i></p>"
    parts.append(f"<p class='lab-message'>{e(m.message)}</p>")
    if m.z is None:
        parts.append(f"{caveat}</div>")
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
