"""The sigmoid-neuron lab: its logic, and its widget driven without a browser."""

import html
import math
import re

import pytest
import torch

import tracekit as tk
from tracekit.lab import SigmoidNeuron, lab_html


def _rows(page: str) -> list[tuple[str, ...]]:
    """The cells of every table row in the lab's HTML, as text."""
    return [tuple(re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr)) for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", page)]


def test_reset_is_a_fixed_start_and_both_inputs_are_required():
    m = SigmoidNeuron()
    assert (m.x, m.w, m.ready, m.z) == (0.0, 0.0, False, None)
    m.set_x(1.0)
    assert m.predict(z=1.5) is False and m.z is None and "BOTH" in m.message
    m.set_w(2.0)
    assert m.run() is True
    m.reset()
    assert (m.x, m.w, m.ready, m.z, m.steps) == (0.0, 0.0, False, None, [])


@pytest.mark.parametrize(("x", "z", "y", "dydx"), [(1.0, 1.5, 0.8176, 0.2983), (0.5, 0.5, 0.6225, 0.4700)])
def test_values_come_from_the_tape_and_match_the_paper(x, z, y, dydx):
    m = SigmoidNeuron()
    m.set_x(x)
    m.set_w(2.0)
    assert m.run()
    assert m.z == pytest.approx(z) and round(m.y, 4) == y and round(m.dydx, 4) == dydx
    assert m.hand_dydx == pytest.approx(m.dydx, abs=1e-6)
    assert [s for s, _, _ in m.saved] == ["MulBackward0.self", "MulBackward0.other", "SigmoidBackward0.result"]
    assert m.saved[0][1] == "2" and m.saved[1][1] == f"{x:g}" and m.saved[2][1] == f"{y:.4g}"


def test_step_walks_forward_then_reverse_highlighting_what_each_rule_reads():
    m = SigmoidNeuron()
    m.set_x(1.0)
    m.set_w(2.0)
    shown = [m.step() for _ in range(6)]
    assert [s.lane for s in shown] == ["forward"] * 3 + ["reverse"] * 3
    assert [s.title for s in shown[:3]] == ["#0 mul", "#1 sub", "#2 sigmoid"]
    sig, sub, mul = shown[3:]
    assert sig.title == "step 0 · SigmoidBackward0" and sig.reads == ("result",)
    assert "reads its own output result = σ(z) = 0.8176" in sig.detail
    assert sub.reads == ()
    assert mul.reads == ("self", "other")
    assert "self = w = 2 for dx" in mul.detail and "other = x = 1 for dw" in mul.detail
    assert m.step() is shown[-1] and m.position == 6  # stays at the end
    page = lab_html(m)
    assert "background:#ffe08a" in page and "z = 1.5000" in page and "y = 0.8176" in page


def test_predict_asks_first_then_shows_the_tape_value_and_the_difference():
    m = SigmoidNeuron()
    m.set_x(1.0)
    m.set_w(2.0)
    assert m.predict() is False and m.z is None and "type a prediction first" in m.message
    assert "1.5000" not in m.text()  # nothing from the tape shows before a guess
    assert m.predict(z=1.4, y=0.8) is True
    rows = {k: (g, round(t, 4), round(d, 4)) for k, g, t, d in m.comparison()}
    assert rows == {"z": (1.4, 1.5, -0.1), "y": (0.8, 0.8176, -0.0176)}
    assert "your z = 1.4   tape z = 1.5000   difference -0.1000" in m.text()
    page = lab_html(m)
    assert ("z", "1.4", "1.5000", "-0.1000") in _rows(page)
    assert m.predict(dydx=0.3) and [k for k, *_ in m.comparison()] == ["dy/dx"]
    assert round(m.comparison()[0][3], 4) == round(0.3 - 0.2983, 4)


@pytest.mark.parametrize("steps", [1, 3, 4, 6])
def test_editing_an_input_keeps_the_current_step_with_new_values(steps):
    m = SigmoidNeuron()
    m.set_x(1.0)
    m.set_w(2.0)
    for _ in range(steps):
        m.step()
    m.predict(y=0.8)
    m.set_x(0.5)  # the seed: edits retain t
    assert m.position == steps and m.z == pytest.approx(0.5) and round(m.y, 4) == 0.6225
    assert m.guesses == {}  # a guess for the old inputs is not compared with the new values
    assert "0.8176" not in m.text() and "1.5000" not in lab_html(m)
    assert m.steps[m.position - 1].title == ["#0 mul", "#1 sub", "#2 sigmoid", "step 0 · SigmoidBackward0",
                                              "step 1 · SubBackward0", "step 2 · MulBackward0"][steps - 1]
    m.set_w(-1.0)
    assert m.position == steps and m.z == pytest.approx(-1.0) and m.dydx == pytest.approx(m.hand_dydx, abs=1e-6)


def test_an_edit_before_any_run_computes_nothing():
    m = SigmoidNeuron()
    m.set_x(1.0)
    m.set_w(2.0)
    m.set_x(3.0)
    assert m.z is None and m.position == 0 and m.steps == []


def test_the_lab_says_it_is_a_teaching_view_not_memory_evidence():
    m = SigmoidNeuron()
    assert "not memory evidence" in m.text() and "not memory evidence" in lab_html(m)
    m.set_x(1.0)
    m.set_w(2.0)
    m.step()
    assert "not memory evidence" in m.text() and "not memory evidence" in lab_html(m)


def test_widget_buttons_and_inputs_without_a_browser():
    lab = tk.lab()
    lab.x.value = "1"
    lab.w.value = "2"
    lab.predict_button.click()  # nothing typed: the lab asks for a guess first
    assert "type a prediction first" in lab.view.value and "1.5000" not in lab.view.value
    lab.guess["y"].value = "zero point eight"
    lab.predict_button.click()
    assert "could not read your y" in lab.view.value
    lab.guess["z"].value, lab.guess["y"].value = "1.5", "0.8"
    lab.predict_button.click()
    assert ("y", "0.8", "0.8176", "-0.0176") in _rows(lab.view.value)
    assert ("z", "1.5", "1.5000", "+0.0000") in _rows(lab.view.value)
    for _ in range(3):
        lab.step_button.click()
    assert lab.model.position == 3
    lab.x.value = "0.5"  # editing after stepping keeps the step; nothing stale stays on screen
    assert "0.8176" not in lab.view.value and lab.model.position == 3 and lab.play.value == 3
    assert lab.guess["y"].value == "" and "lab-guesses" not in lab.view.value
    lab.play.value = 6  # what the Play timer does, one tick at a time in the browser
    assert lab.model.position == 6 and "y = 0.6225" in lab.view.value
    assert "dy/dx = <span class='lab-dydx'>0.4700</span>" in lab.view.value
    lab.reset_button.click()
    assert (lab.x.value, lab.w.value, lab.model.ready) == ("", "", False)
    assert "set both x and w" in lab.view.value
    bundle = lab._repr_mimebundle_()
    note, rest = bundle["text/plain"].split("\n", 1)  # what a reopened notebook shows: it says how to get the lab
    assert "Run this cell" in note and "reopened" in note and rest.startswith("x = not set, w = not set")
    assert "application/vnd.jupyter.widget-view+json" in bundle


@pytest.mark.parametrize(("steps", "read"), [(3, []), (4, ["SigmoidBackward0.result"]), (5, []),
                                             (6, ["MulBackward0.self", "MulBackward0.other"])])
def test_the_saved_values_the_current_reverse_step_reads_are_highlighted(steps, read):
    m = SigmoidNeuron()
    m.set_x(1.0)
    m.set_w(2.0)
    for _ in range(steps):
        m.step()
    hot = re.findall(r"<tr style='background:#ffe08a'><td[^>]*>([^<]*)</td>", lab_html(m))
    assert hot == read


def test_zero_is_a_value_you_can_set_and_it_completes_set_both():
    m = SigmoidNeuron()
    assert m.enter("x", "0") and m.x_set and not m.ready and "now set w too" in m.message
    assert m.enter("w", "0") and m.ready
    assert m.run() and (m.z, m.dydx) == (-0.5, 0.0)  # z = 0·0 − 0.5; dy/dx = w·σ'(z) = 0
    lab = tk.lab()
    lab.x.value = "0"  # the box starts empty, so typing the start value 0 is an edit the lab sees
    lab.w.value = "2"
    lab.step_button.click()
    assert lab.model.ready and "z = -0.5000" in lab.view.value


@pytest.mark.parametrize(("text", "says"), [
    ("", "x is empty"), ("   ", "x is empty"), ("abc", "could not read x 'abc'"), ("1,5", "could not read x '1,5'"),
    ("nan", "not a finite float32"), ("inf", "not a finite float32"), ("1e39", "not a finite float32")])
def test_an_input_that_is_not_a_number_is_refused_with_a_reason_and_the_old_value_kept(text, says):
    m = SigmoidNeuron()
    m.enter("w", "2")
    assert m.enter("x", text) is False and says in m.message and "x is still not set" in m.message
    assert not m.x_set and says in m.text() and says in html.unescape(lab_html(m))
    m.enter("x", "1")
    m.step()
    assert m.enter("x", text) is False and "x is still 1" in m.message
    assert m.x == 1.0 and m.z == pytest.approx(1.5)  # the run stays ...
    assert says in html.unescape(lab_html(m))  # ... and the reason shows


@pytest.mark.parametrize(("x", "w"), [(-1.0, 2.0), (1.0, -3.0), (-1000.0, 1.0), (1000.0, 1.0), (-2.5, -0.5)])
def test_negative_and_large_inputs_run_and_the_paper_formula_agrees(x, w):
    m = SigmoidNeuron()
    assert m.enter("x", str(x)) and m.enter("w", str(w)) and m.run()
    z = torch.tensor(w) * torch.tensor(x) - 0.5
    assert m.z == pytest.approx(z.item()) and m.y == pytest.approx(torch.sigmoid(z).item())
    assert m.hand_dydx == pytest.approx(m.dydx, abs=1e-6)  # no overflow in the paper formula for z = -1000.5
    assert "-0.0000" not in m.steps[0].detail


def test_an_invalid_guess_after_the_tape_ran_is_answered():
    lab = tk.lab()
    lab.x.value, lab.w.value = "1", "2"
    lab.step_button.click()
    assert lab.model.z is not None
    for typed, says in (("abc", "could not read your z 'abc'"), ("inf", "your z = inf is not a finite")):
        lab.guess["z"].value = typed
        lab.predict_button.click()
        assert says in html.unescape(lab.view.value) and "lab-guesses" not in lab.view.value
    lab.guess["z"].value = ""
    lab.predict_button.click()
    assert "type a prediction first" in lab.view.value
    lab.guess["z"].value = "-1.5"  # a negative guess is a guess
    lab.predict_button.click()
    assert ("z", "-1.5", "1.5000", "-3.0000") in _rows(lab.view.value)


# what float32 cannot hold, typed into x (w = 2): the words the refusal says
FLOAT32_CANNOT = {"1e-50": "would compute with 0", "-1e-50": "would compute with 0",
                  "1e-45": "a subnormal number", "-3e-39": "a subnormal number", "1e-39": "a subnormal number",
                  "3.5e38": "not a finite float32", "-1e300": "not a finite float32", "nan": "not a finite float32",
                  "-inf": "not a finite float32"}


@pytest.mark.parametrize("text", list(FLOAT32_CANNOT))
def test_what_float32_cannot_hold_is_refused_not_silently_changed(text):
    """The tape computes in float32: an x it would hold as 0, as a subnormal, or as ±inf is refused."""
    held = torch.tensor(float(text), dtype=torch.float32).item()
    assert held != float(text) or not math.isfinite(held)  # float32 really cannot hold it (measured)
    m = SigmoidNeuron()
    m.enter("w", "2")
    m.enter("x", "1")
    m.run()
    assert m.enter("x", text) is False and FLOAT32_CANNOT[text] in m.message and "x is still 1" in m.message
    assert m.x == 1.0 and m.z == pytest.approx(1.5)
    assert "1.2e-38" in m.message or "3.4e38" in m.message  # what would be accepted


@pytest.mark.parametrize(("text", "computes_with"), [("16777217", "16777216"), ("0.123456789", "0.12345679"),
                                                      ("1.00000001", "1")])
def test_a_value_float32_rounds_says_the_value_the_tape_computes_with(text, computes_with):
    m = SigmoidNeuron()
    m.enter("w", "1")
    assert m.enter("x", text) and f"x = {text} (the float32 tape computes with {computes_with}) set" in m.message
    m.run()
    assert m.x == torch.tensor(float(text)).item() == torch.tensor(float(computes_with)).item()  # the tape's value
    assert m.z == pytest.approx(float(computes_with) - 0.5)


@pytest.mark.parametrize("text", ["0.1", "-2.5", "1.2e-38", "3.4e38", "0", "1e-20"])
def test_a_value_float32_holds_as_typed_is_set_without_a_note(text):
    m = SigmoidNeuron()
    assert m.enter("x", text) and m.message.startswith(f"x = {text} set") and "float32" not in m.message
    assert m.x == torch.tensor(float(text)).item()


@pytest.mark.parametrize(("x", "w"), [("1e20", "1e20"), ("-3e38", "2"), ("2", "3e38")])
def test_a_product_that_overflows_float32_is_refused(x, w):
    assert not math.isfinite((torch.tensor(float(x)) * torch.tensor(float(w))).item())  # it does overflow
    m = SigmoidNeuron()
    assert m.enter("x", x)
    assert m.enter("w", w) is False and "overflow" in m.message and "w is still not set" in m.message
    assert not m.ready
