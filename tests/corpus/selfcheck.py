"""Run each corpus variant cell by cell in a fresh Python and judge its answers with the corpus author's own checks.

Not the course grader: the checks below are written from the prompts' meaning (values measured with plain
PyTorch and tk.trace), so that a variant's `# expect:` line can be compared with an independent judgement.
Cells that call `tk.check(` are skipped. Usage: python tests/corpus/selfcheck.py [ex01 ...] [--file PATH]
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CELL_TIMEOUT_S = 20


def parse(path: Path) -> tuple[dict[str, str], list[str]]:
    """Split a percent-format variant into its header fields and its code cells."""
    header: dict[str, str] = {}
    cells: list[str] = []
    current: list[str] | None = None
    for line in path.read_text().splitlines():
        if re.match(r"^# %%", line):
            if current is not None:
                cells.append("\n".join(current))
            current = []
        elif current is None:
            m = re.match(r"^# (\w+): (.*)$", line)
            if m:
                header[m.group(1)] = m.group(2)
        else:
            current.append(line)
    if current is not None:
        cells.append("\n".join(current))
    return header, cells


def expectations(header: dict[str, str]) -> dict[str, str]:
    """The `# expect:` line as {question: full|zero|less}."""
    return dict(item.split("=") for item in header.get("expect", "").split())


class CellTimeout(Exception):
    """A cell ran past CELL_TIMEOUT_S."""


def _alarm(signum, frame):  # noqa: ARG001
    raise CellTimeout(f"cell ran past {CELL_TIMEOUT_S} s")


def run_cells(cells: list[str]) -> tuple[dict, list[str]]:
    """Execute cells in order in one namespace, as Jupyter would; a failing cell does not stop the rest."""
    ns: dict = {"__name__": "__main__"}
    log = []
    signal.signal(signal.SIGALRM, _alarm)
    for i, src in enumerate(cells):
        if "tk.check(" in src:
            log.append(f"cell {i}: skipped (tk.check)")
            continue
        try:
            code = compile(src, f"<cell {i}>", "exec")
        except SyntaxError as err:
            log.append(f"cell {i}: SyntaxError {err.msg}")
            continue
        signal.alarm(CELL_TIMEOUT_S)
        try:
            exec(code, ns)
            log.append(f"cell {i}: ok")
        except CellTimeout as err:
            log.append(f"cell {i}: timeout ({err})")
        except BaseException as err:  # noqa: BLE001 - a cell may raise anything
            log.append(f"cell {i}: raised {type(err).__name__}: {str(err)[:80]}")
        finally:
            signal.alarm(0)
    return ns, log


def child(path: str) -> None:
    """In a fresh interpreter: run the variant, then print the author's judgement as JSON."""
    p = Path(path)
    _, cells = parse(p)
    ns, log = run_cells(cells)
    ex = p.parent.name
    sys.path.insert(0, str(HERE))
    import reference

    verdict = {}
    for q, judge in reference.JUDGES[ex].items():
        signal.alarm(CELL_TIMEOUT_S * 3)
        try:
            verdict[q] = judge(ns)
        except BaseException as err:  # noqa: BLE001
            verdict[q] = f"bad ({type(err).__name__}: {str(err)[:60]})"
        finally:
            signal.alarm(0)
    print("@@" + json.dumps({"log": log, "verdict": verdict}))


def main(argv: list[str]) -> int:
    """Run the named exercises' variants (default: all) and print expectation vs the author's judgement."""
    if len(argv) >= 2 and argv[0] == "--child":
        child(argv[1])
        return 0
    files = [Path(a) for a in argv[argv.index("--file") + 1:]] if "--file" in argv else []
    if not files:
        exes = argv or sorted(d.name for d in HERE.iterdir() if d.is_dir() and d.name.startswith("ex"))
        files = [f for ex in exes for f in sorted((HERE / ex).glob("*.py"))]
    bad = 0
    for f in files:
        header, _ = parse(f)
        exp = expectations(header)
        proc = subprocess.run([sys.executable, __file__, "--child", str(f)], capture_output=True, text=True,
                              timeout=600)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("@@")), None)
        if line is None:
            print(f"{f.parent.name}/{f.name}: no result\n{proc.stderr[-2000:]}")
            bad += 1
            continue
        res = json.loads(line[2:])
        marks = []
        for q, e in exp.items():
            v = res["verdict"].get(q, "missing")
            ok = v == "ok"
            agree = ok if e == "full" else not ok
            marks.append(f"{q}={e}:{'ok' if ok else 'bad'}{'' if agree else '(!)'}")
            bad += not agree
        fails = [entry for entry in res["log"] if not entry.endswith(": ok") and "skipped" not in entry]
        print(f"{f.parent.name}/{f.name:28s} {' '.join(marks)}  {'; '.join(fails)}")
    print(f"{bad} disagreement(s) between expect and the author's value checks (see (!); a mechanism the "
          f"prompt forbids can compute right values, so a (!) on such a variant is explained in its why)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
