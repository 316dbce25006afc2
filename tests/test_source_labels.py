"""Source labels name a notebook cell as the student sees it: `cell [3] line 5`, not `cell:5`."""

import pytest

import tracekit as tk
from tracekit.frames import where


def test_a_file_keeps_file_and_line():
    import torch

    x = torch.ones(2, requires_grad=True)
    with tk.capture() as cap:
        y = x.exp()
    assert cap.trace(y).nodes[0].source.startswith("test_source_labels.py:")


def test_a_cell_is_named_by_its_execution_count_and_line():
    shell_module = pytest.importorskip("IPython.core.interactiveshell")
    shell = shell_module.InteractiveShell.instance()
    try:
        shell.run_cell("import torch, tracekit as tk", store_history=True)
        shell.run_cell("def f(a):\n    return a.exp()", store_history=True)  # defined in one cell ...
        count = shell.execution_count
        shell.run_cell("x = torch.ones(2, requires_grad=True)\nwith tk.capture() as cap:\n    y = f(x)\n"
                       "src = cap.trace(y).nodes[0].source", store_history=True)  # ... run in the next
        assert shell.user_ns["src"] == f"cell [{count - 1}] line 2"  # the cell that holds the line
        shell.run_cell("import sys\nlabel = tk.frames.where(sys._getframe())", store_history=True)
        assert shell.user_ns["label"] == f"cell [{count + 1}] line 2"
    finally:
        shell_module.InteractiveShell.clear_instance()


def test_without_a_frame_there_is_no_label():
    assert where(None) is None


def test_a_trace_keeps_the_count_of_the_run_that_made_it_when_the_cell_runs_again():
    """A kernel names a cell's file by its text, so a rerun of the same cell reuses the file: a trace
    made in the first run still says that run's number (its lines are made text when first read)."""
    compiler = pytest.importorskip("ipykernel.compiler")
    shell_module = pytest.importorskip("IPython.core.interactiveshell")
    shell = shell_module.InteractiveShell.instance(compiler_class=compiler.XCachingCompiler)
    try:
        shell.run_cell("import torch, tracekit as tk", store_history=True)
        cell = "x = torch.ones(2, requires_grad=True)\nwith tk.capture() as cap:\n    y = x.exp()\ntr = cap.trace(y)"
        first = shell.execution_count
        shell.run_cell(cell, store_history=True)
        shell.run_cell("earlier = tr", store_history=True)
        again = shell.execution_count
        shell.run_cell(cell, store_history=True)  # the same text: the same file name
        earlier, now = shell.user_ns["earlier"], shell.user_ns["tr"]
        assert earlier is not now
        assert earlier.nodes[0].source == f"cell [{first}] line 3"
        assert now.nodes[0].source == f"cell [{again}] line 3"
        assert [n.call for n in earlier.nodes] == ["exp"]
    finally:
        shell_module.InteractiveShell.clear_instance()
