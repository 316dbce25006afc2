"""The benchmarks' own tools. benchmarks/against.py --without-probe times tracekit against a copy
whose fill() skips the hook probe: the copy must be tracekit with exactly that line changed, and the
probe must be what keeps a trace from running an unpack hook (else the row measures something else).
benchmarks/run.py: a partial run (--only, --quick) writes its results beside the full run's."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHECK = r"""
import sys, difflib
from pathlib import Path
sys.path.insert(0, %(bench)r)
import torch, tracekit as tk, against
bare = against.without_probe(Path(sys.argv[1]))
ours, copy = (Path(m.__file__).parent / "build.py" for m in (tk, bare))
changed = [l for l in difflib.unified_diff(ours.read_text().splitlines(), copy.read_text().splitlines(), n=0)
           if l[:1] in "+-" and l[:3] not in ("+++", "---")]
print(changed)

def unpacked_by(module):
    x, c = torch.randn(3, requires_grad=True), torch.randn(3)
    y = (x * c).sum()
    calls = []
    y.grad_fn.next_functions[0][0]._raw_saved_other.register_hooks(lambda t: t, lambda t: calls.append(1) or t)
    tr = module.trace(y)
    return len(calls), [r.slot for r in tr.residuals]

print(unpacked_by(tk), unpacked_by(bare))
(Path(sys.argv[1]) / "at").mkdir()
head = against.at_commit(Path(sys.argv[1]) / "at", "HEAD")
x = torch.randn(4, requires_grad=True)
y = (x.exp() * x).sum()
print(head.__name__, head.trace(y).to_json() == tk.trace(y).to_json())
"""


def test_the_copy_without_the_probe_differs_by_that_line_and_runs_the_hook_tracekit_does_not(tmp_path):
    """(and a commit's copy, for --rev, imports beside tracekit and traces as it does)"""
    script = tmp_path / "check.py"
    script.write_text(CHECK % {"bench": str(ROOT / "benchmarks")})
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "copy")], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    changed, unpacked, at_head = done.stdout.strip().splitlines()
    assert changed == str(["-            probed = unhooked", "+            probed = True  # (no probe: measured only)"])
    assert unpacked == "(0, ['other']) (1, ['other'])"  # tracekit reads it packed; the copy ran the hook
    assert at_head == "tracekit_at_HEAD True"  # --rev's copy: the commit's tracekit, imported beside this one


def test_a_partial_benchmark_run_writes_beside_the_full_runs_results_not_over_them():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import run

    everything = ",".join(run.BENCHES)
    assert run.default_out(everything, False) == ROOT / "benchmarks" / "results.json"
    assert run.default_out(" , ".join(reversed(list(run.BENCHES))), False).name == "results.json"
    for only, quick in (("capture", False), ("capture,floor,dot", False), (everything, True)):
        assert run.default_out(only, quick) == ROOT / "benchmarks" / "results-partial.json"
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "benchmarks/results-partial.json"],
                             capture_output=True, text=True)
    assert ignored.returncode == 0  # never committed by mistake
