"""ex02 · A small trace, by hand (probe side: no truth here)."""

from __future__ import annotations

from .base import Exercise, cases_question, lesson_link, programs_table

LESSON = "02_small_trace"
# program id -> (source, which of a, b require grad); a and b are float32 vectors of length 4
PROGRAMS = {
    "P1": ("(a.exp() * b).sum()", "ab"),
    "P2": ("(a.sin() * b).sum()", "a"),
    "P3": ("(a.tanh() / b).sum()", "ab"),
    "P4": ("(a * b).exp().sum()", "ab"),
    "P5": ("(a.sigmoid() * a).sum()", "a"),
    "P6": ("(a.cos() + b.exp()).sum()", "ab"),
    "P7": ("(a * 3).sigmoid().sum()", "a"),
    "P8": ("(a.exp() * b.sin()).sum()", "b"),
}
WHO = {"ab": "a and b", "a": "only a", "b": "only b"}
_FAMILY = ("`a` and `b` are float32 vectors of length 4 (positive values); you hold `a`, `b` and `y`, and "
           "nothing else. The programs:\n\n" + programs_table(PROGRAMS, WHO, "program", "y = ") +
           f"\n\nAnswer with a dict keyed by program id (`\"{list(PROGRAMS)[0]}\"` … `\"{list(PROGRAMS)[-1]}\"`); "
           "every program is checked.")

EXERCISE = Exercise(
    "ex02", "A small trace, by hand", LESSON,
    (
        cases_question("q1", 2, "for each program: the reverse rules (node names) in the order backward runs them",
                       "q1_order", PROGRAMS, keyed_by=None, details=(
                     "For each program give the list of node names, e.g. `[\"SumBackward0\", …]`, in the order "
                     "`y.backward()` runs them; leave out `AccumulateGrad` (it writes `.grad`). A rule runs once every "
                     "rule that feeds it a gradient has run; among the rules ready at the same time, PyTorch runs "
                     "the one created last (the highest sequence number) first. Where two rules do not depend on "
                     "each other, any order that respects the dependencies is accepted. "
                     f"See {lesson_link(LESSON)}.")),
        cases_question("q2", 2, "for each program: {node name: set of saved slots that rule reads}",
                       "q2_reads", PROGRAMS, keyed_by=None, details=(
                     "For each program a dict `{node name: set of slots}`, with every rule of q1 (an empty set "
                     "for a rule that reads nothing). Slot names as PyTorch gives them (`self`, `other`, "
                     f"`result`). Sets, so the order does not matter. See {lesson_link(LESSON)}.")),
        cases_question("q3", 2, "for each program: {'Node.slot': step after which its memory is freed, or None}",
                       "q3_freed", PROGRAMS, keyed_by=None, details=(
                     "For each program a dict with one entry per residual, keyed `\"NodeName.slot\"`: the index "
                     "of the step (0 = the first rule backward runs, in the order backward runs them; where two "
                     "rules are independent, the steps of any valid order are accepted) "
                     "after which the memory of that saved value is freed, or `None` if it is still held after "
                     "backward (for instance because you hold that tensor yourself). A value saved by two "
                     "rules is freed only when both are done. See "
                     f"{lesson_link(LESSON)} and {lesson_link('03_storage')}.")),
    ),
    intro="Every question uses the same family of programs:\n\n" + _FAMILY,
)
