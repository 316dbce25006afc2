"""The trace is data: one lifetime per residual that every view reads, a prediction that backward
leaves alone, a trace that holds nothing alive, and a record that pickles and round-trips as JSON.

A property test over random graphs (leaves and their views, shared storages, intermediates seen
through two views, one or two outputs, retain_graph, create_graph) checks each on the real runtime."""

import gc
import html
import json
import os
import pickle
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekit as tk
from tracekit.render.dot import trace_graph
from tracekit.storage import weak_expired

N = 4
UNARY = {"exp": torch.exp, "sin": torch.sin, "sigmoid": torch.sigmoid, "tanh": torch.tanh}
OPS = [*UNARY, "mul", "add", "views", "const"]


@st.composite
def programs(draw):
    """A small program: leaves, a few ops over a pool of values, one or two scalar outputs."""
    ops = draw(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 99), st.integers(0, 99)),
                        min_size=1, max_size=4))
    return {"leaves": draw(st.integers(1, 2)), "ops": ops, "outputs": draw(st.integers(1, 2)),
            "retain": draw(st.booleans()), "create": draw(st.booleans()), "seed": draw(st.integers(0, 3))}


def run(program, leaves):
    """The program's outputs (scalars). Values live only in this function, as in a user's helper."""
    torch.manual_seed(program["seed"])
    const = torch.randn(N)
    pool = [leaf[:N] for leaf in leaves] + [leaf[N:] for leaf in leaves]  # two views of each leaf's storage
    for op, i, j in program["ops"]:
        a, b = pool[i % len(pool)], pool[j % len(pool)]
        if op in UNARY:
            pool.append(UNARY[op](a))
        elif op == "mul":
            pool.append(a * b)
        elif op == "add":
            pool.append((a + b).exp())
        elif op == "const":
            pool.append(a * const)
        else:  # one intermediate seen through two views: a shared storage
            big = torch.cat([a, b]).sin()
            pool += [big[:N], big[N:]]
    outs = [pool[-1].sum()]
    if program["outputs"] == 2:
        outs.append((pool[len(pool) // 2] * pool[-1]).sum())
    return outs


def make_leaves(program):
    torch.manual_seed(100 + program["seed"])
    return [torch.randn(2 * N, requires_grad=True) for _ in range(program["leaves"])]


def drawn_lifetimes(tr):
    """residual label -> its lifetime words, as the drawing shows them (HTML strip and plain lines)."""
    out_html, out_plain = {}, {}
    src = trace_graph(tr, html=True).source.replace('<br align="left"/>', " ")  # long words wrap in the strip
    plain = trace_graph(tr, html=False).source.replace("\\l", "\n").replace("\n    ", " ")  # and in plain lines
    for r in tr.residuals:
        key = f"#{r.node.index} {r.node.name}.{r.slot} · "
        rows = [row for row in src.split("<tr>") if html.escape(key) in row]
        if rows:
            (row,) = rows
            out_html[r.label] = html.unescape(re.findall(r'<font point-size="9"> (.*?)</font></td></tr>', row)[-1])
        lines = [line for line in plain.split("\n") if key in line and ": saved at #" in line]
        if lines:
            (line,) = lines
            out_plain[r.label] = line.split(": saved at #", 1)[1].split(", ", 1)[1].replace('\\"', '"')
    return out_html, out_plain


def check_views_read(tr, lifetimes):
    """The table, the text and the drawing show exactly these lifetimes."""
    words = [lt.words() for lt in lifetimes.residuals]
    table = tr.table()
    assert [row[-1] for row in table.rows] == words
    text = tr.text()
    assert all(("  " + line).rstrip() in text for line in str(table).split("\n"))
    out_html, out_plain = drawn_lifetimes(tr)
    expected = {r.label: w for r, w in zip(tr.residuals, words)}
    # the strip is drawn for small traces, unless it would not fit the width at full size (issue 30:
    # then the drawing points to tr.timeline() instead)
    fits = "tr.timeline() plots" not in trace_graph(tr, html=True).source
    drawn = len(tr.residuals) <= 12 and len(tr.nodes) + len(lifetimes.order) <= 32 and fits
    assert out_html == (expected if drawn else {})
    assert out_plain == (expected if len(tr.residuals) <= 12 and fits else {})


def renders(tr):
    return (tr.text(), str(tr.table()), trace_graph(tr, html=True).source, trace_graph(tr, html=False).source,
            tr.predict_backward().text(), tr.summary())


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
@settings(max_examples=int(os.environ.get("TRACEKIT_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # CI sets TRACEKIT_EXAMPLES=60
@given(programs())
def test_views_read_one_lifetime_and_the_prediction_survives_backward(program):
    leaves = make_leaves(program)
    outs = run(program, leaves)
    tr = tk.trace(*outs)
    predicted = tr.predict_backward().lifetimes
    assert tr.lifetimes() == predicted and predicted.predicted
    check_views_read(tr, predicted)
    before = renders(tr)
    for copy in (pickle.loads(pickle.dumps(tr)), tk.load_trace(tr.to_json())):
        assert copy.record == tr.record and renders(copy) == before
    predicted_text = tr.predict_backward().text()
    retained = tr.predict_backward(retain_graph=True).lifetimes

    tr.backward(retain_graph=program["retain"] or None, create_graph=program["create"])
    observed = tr.lifetimes()
    assert not observed.predicted and observed.retained == (program["retain"] or program["create"])
    check_views_read(tr, observed)
    assert tr.predict_backward().lifetimes == predicted and tr.predict_backward().text() == predicted_text
    assert tr.predict_backward(retain_graph=True).lifetimes == retained
    if not observed.retained:  # the structure predicts what the engine did
        assert observed.order == predicted.order
        assert [lt.released_at for lt in observed.residuals] == [lt.released_at for lt in predicted.residuals]
    after = renders(tr)
    for copy in (pickle.loads(pickle.dumps(tr)), tk.load_trace(tr.to_json())):
        assert copy.record == tr.record and copy.lifetimes() == observed and renders(copy) == after


def _expired_after_del(program, keep_trace):
    """Which saved storages are gone once the caller drops the outputs, with the trace kept or not."""
    leaves = make_leaves(program)
    outs = run(program, leaves)
    tr = tk.trace(*outs)
    if keep_trace:
        del outs
        return [s.expired() for s in tr.storages]
    weaks, tr._data.weaks = tr._data.weaks, None  # keep only the bare weak references: no tracekit object
    del tr
    del outs
    try:
        return [weak_expired(w) for w in weaks]
    finally:
        for w in weaks:
            torch.UntypedStorage._free_weak_ref(w)


@settings(max_examples=40, deadline=None)
@given(programs())
def test_deleting_the_outputs_frees_what_plain_pytorch_frees(program):
    enabled = gc.isenabled()
    gc.disable()  # no cyclic collector: a trace must not need one to let go
    try:
        assert _expired_after_del(program, True) == _expired_after_del(program, False)
    finally:
        if enabled:
            gc.enable()


def test_a_kept_trace_does_not_keep_the_saved_value_and_backward_then_says_so():
    a = torch.randn(1 << 20, requires_grad=True)
    y = a.exp().sum()  # exp saves its 4 MiB result
    tr = tk.trace(y)
    (saved,) = tr.graph_owned_storages()
    assert saved.nbytes == 4 << 20 and not saved.expired()
    del y
    assert saved.expired()  # freed as in plain PyTorch, with tr still held
    assert "ExpBackward0" in tr.text() and tr.svg  # the record still renders
    with pytest.raises(tk.GraphReleasedError, match="Keep the output in a variable"):
        tr.backward()
    assert issubclass(tk.GraphReleasedError, tk.TracekitError)


def test_a_dropped_trace_frees_without_the_cyclic_collector():
    import weakref

    a = torch.randn(8, requires_grad=True)
    y = (a.exp() * a).sin().sum()
    enabled = gc.isenabled()
    gc.disable()
    try:
        tr = tk.trace(y).backward()
        _ = tr.text(), tr.table(), tr.steps, tr.predict_backward()
        refs = weakref.ref(tr), weakref.ref(tr._data)
        del tr, _
        assert [r() for r in refs] == [None, None]  # reference counting alone freed the trace and its data
    finally:
        if enabled:
            gc.enable()


def test_the_wrong_free_point_the_drawing_used_to_show():
    """cos's saved x is freed after sin's step (sin still holds it), not after cos's own step."""
    def f(a):
        x = a * 2
        return (x.sin() + x.cos()).sum()

    a = torch.randn(1000, requires_grad=True)
    y = f(a)
    tr = tk.trace(y)
    out_html, out_plain = drawn_lifetimes(tr)
    cos = "#2 CosBackward0.self"
    assert out_html[cos] == out_plain[cos] == "released after step 2; freed after step 3 (predicted)"
    tr.backward()
    assert tr.residuals[2].free_point() == "released after step 2; freed after step 3"
    assert tr.predict_backward().free_point(tr.residuals[2]) == "released after step 2; freed after step 3 (predicted)"


def test_a_loaded_trace_is_a_record_and_says_so(tmp_path):
    a = torch.randn(3, requires_grad=True)
    y = a.exp().sum()
    tr = tk.trace(y)
    path = tmp_path / "trace.json"
    tr.to_json(path)
    loaded = tk.load_trace(path)
    assert loaded.record == tr.record and loaded.text() == tr.text()
    with pytest.raises(tk.GraphReleasedError, match="loaded from a file"):
        loaded.backward()
    path.write_text('{"format": "tracekit-trace", "version": 999}')
    with pytest.raises(tk.TraceFormatError, match="version 999"):
        tk.load_trace(path)


@settings(max_examples=20, deadline=None)
@given(programs())
def test_the_columns_and_the_rows_made_from_them_say_the_same(program):
    """The record is stored by column; its rows, the views, JSON and pickle read the same facts."""
    leaves = make_leaves(program)
    outs = run(program, leaves)
    tr = tk.trace(*outs)
    rec = tr.record
    for rows, columns in ((rec.nodes, rec.node_columns), (rec.residuals, rec.residual_columns),
                          (rec.storages, rec.storage_columns)):
        assert len(rows) == len(columns[0])
        for name in columns._fields:
            got = [getattr(row, name) for row in rows]
            want = list(getattr(columns, name))
            if name == "shape":  # kept as torch.Size, shown as a plain tuple
                want = [None if s is None else tuple(s) for s in want]
                assert all(type(s) is tuple for s in got if s is not None)
            assert got == want, name
    assert [r.shape for r in tr.residuals] == [row.shape for row in rec.residuals]
    assert [(n.name, n.inputs, n.module) for n in tr.nodes] == [(row.name, row.inputs, row.module) for row in rec.nodes]
    copy = pickle.loads(pickle.dumps(rec))
    assert copy == rec and copy._rows == {}  # the rows made when read do not travel
    assert tk.load_trace(tr.to_json()).record == rec


def test_lifetimes_are_made_when_read_and_equal_the_ones_made_at_once():
    torch.manual_seed(0)
    a = torch.randn(6, requires_grad=True)
    y = (a.exp() * a.sin()).tanh().sum()
    tr = tk.trace(y)
    predicted = tr.lifetimes()
    assert callable(predicted._residuals)  # the prediction's per-residual lifetimes: not made yet
    tr.backward()
    observed = tr._data.observed
    assert callable(observed._residuals)  # backward made the step lists, no Lifetime yet
    eager = tk.Lifetimes(observed.kind, observed.order, tuple(observed.residuals), observed.released,
                         observed.freed, observed.retained, observed.error)
    assert observed == eager and not callable(observed._residuals)
    assert [r.released_at for r in tr.residuals] == [lt.released_at for lt in observed.residuals]
    assert all(lt.released_at is not None for lt in observed.residuals)
    assert pickle.loads(pickle.dumps(observed)) == observed


def test_a_long_trace_draws_without_predicting_a_lifetime():
    """The strip of a long trace cannot fit: the drawing says so before predicting anything."""
    v = torch.randn(8, requires_grad=True)
    for _ in range(400):
        v = v * 1.0001
    y = v.sum()
    tr = tk.trace(y)
    source = trace_graph(tr, html=True).source
    assert "tr.timeline() plots" in source and tr._data.predicted is None
    small = tk.trace((torch.randn(3, requires_grad=True).exp()).sum())
    assert "lifetimes (predicted)" in trace_graph(small, html=True).source and small._data.predicted is not None


def test_role_words_and_previews_are_made_when_read_and_read_as_text():
    """The build keeps what a residual's role words and preview are made of; the text is made on the
    first read, and pickle, JSON and equality see plain tuples of text."""
    from tracekit.rows import Formatted

    a = torch.tensor([0.5, -1.25], requires_grad=True)
    flags = torch.tensor([[True, False], [False, True]])
    y = a.exp()  # saves its own output
    z = (y * a).sum() + (a * flags).sum() + (a * torch.tensor(3)).sum()  # another node's output; a bool; an int
    tr = tk.trace(z)
    columns = tr.record.residual_columns
    assert isinstance(columns.role, Formatted) and columns.role._text is None  # nothing made yet
    assert isinstance(columns.preview, Formatted) and columns.preview._text is None
    words = [(r.node.name, r.slot, r.role, r.preview) for r in tr.residuals]
    assert ("ExpBackward0", "result", "output of #0 ExpBackward0 (this node)", "[1.649, 0.2865]") in words
    assert ("MulBackward0", "self", "output of #0 ExpBackward0", "[1.649, 0.2865]") in words
    assert ("MulBackward0", "other", "constant flags", "[True, False, False, True]") in words  # 2-d: flat
    assert ("MulBackward0", "other", "constant (no grad)", "3") in words
    assert type(columns.role._text) is tuple and columns.role._make is None  # made once, then kept
    copy = pickle.loads(pickle.dumps(tr.record))
    assert type(copy.residual_columns.role) is tuple and type(copy.residual_columns.preview) is tuple
    assert copy == tr.record and tr.record == copy
    assert tk.load_trace(tr.to_json()).record == tr.record
    assert columns.role == tuple(columns.role) and hash(columns.role) == hash(tuple(columns.role))


def test_a_trace_file_goes_where_it_is_asked_and_says_clearly_where_it_cannot(tmp_path, monkeypatch):
    """The user's first steps off the path with tr.to_json(path) / tk.load_trace(path): a folder for a
    file, folders not made yet, `~`, a file in the way of a folder, a link, a private or hard-linked
    file, a write that fails, a damaged or missing file; each either works or names the problem."""
    y = torch.randn(3, requires_grad=True).exp().sum()
    tr = tk.trace(y)
    text = tr.to_json()
    for folder in (tmp_path, str(tmp_path)):  # a folder for a file, as a Path and as text
        with pytest.raises(tk.TraceFileError, match="is a folder: give the file to write, e.g. tr.to_json") as err:
            tr.to_json(folder)
        assert isinstance(err.value, OSError) and str(tmp_path / "trace.json") in str(err.value)
        with pytest.raises(tk.TraceFileError, match="is a folder: give the trace file"):
            tk.load_trace(folder)
    deep = tmp_path / "runs" / "today" / "trace.json"  # folders that do not exist yet are made
    assert tr.to_json(deep) == text and deep.read_text() == text
    assert tk.load_trace(deep).record == tr.record and tk.load_trace(str(deep)).record == tr.record
    monkeypatch.setenv("HOME", str(tmp_path))  # `~` is the user's home, not a folder named "~"
    tr.to_json("~/home.json")
    assert (tmp_path / "home.json").read_text() == text and tk.load_trace("~/home.json").record == tr.record
    (tmp_path / "notes").write_text("a file where a folder is asked for")
    with pytest.raises(tk.TraceFileError, match="notes is a file, not a folder"):
        tr.to_json(tmp_path / "notes" / "trace.json")
    assert (tmp_path / "notes").read_text() == "a file where a folder is asked for"
    link, target = tmp_path / "latest.json", tmp_path / "runs" / "target.json"
    target.write_text("old")
    link.symlink_to(target)  # writing through a link keeps the link
    tr.to_json(link)
    assert link.is_symlink() and target.read_text() == text
    private, twin = tmp_path / "private.json", tmp_path / "twin.json"
    private.write_text("old")
    private.chmod(0o600)
    os.link(private, twin)  # a file is written in place: its mode and its other names stay
    tr.to_json(private)
    assert oct(private.stat().st_mode & 0o777) == oct(0o600) and twin.read_text() == text

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(Path, "write_text", disk_full)
        with pytest.raises(tk.TraceFileError, match="cannot write .*kept.json: No space left on device"):
            tr.to_json(tmp_path / "kept.json")
    with pytest.raises(tk.TraceFileError, match="cannot write .*: File name too long"):
        tr.to_json(tmp_path / ("x" * 300 + ".json"))
    for missing in (tmp_path / "nope.json", str(tmp_path / "nope.json"), "not json, not a file " * 30):
        with pytest.raises(tk.TraceFileError, match="no such trace file|cannot read"):
            tk.load_trace(missing)
    deep.write_text(text[: len(text) // 2])  # a file cut short
    with pytest.raises(tk.TraceFormatError, match="not valid JSON"):
        tk.load_trace(deep)
    damaged = json.loads(text)
    del damaged["residuals"]
    with pytest.raises(tk.TraceFormatError, match="damaged or incomplete .*residuals"):
        tk.load_trace(json.dumps(damaged))
    damaged = json.loads(text)
    damaged["nodes"]["rows"] = [[1]]
    with pytest.raises(tk.TraceFormatError, match="damaged or incomplete"):
        tk.load_trace(json.dumps(damaged))
    assert tk.load_trace(text.encode()).record == tr.record  # the JSON as bytes, as read from a file


def test_a_trace_with_symbolic_sizes_says_why_it_cannot_be_saved():
    """Fake tensors with a ShapeEnv give symbolic sizes (s0): the trace reads them (`44*s0 B`), but a
    saved trace holds numbers, so to_json and pickle say so by name instead of failing in json or
    pybind11; a fake trace with concrete shapes saves and reads back as before."""
    import pickle

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    mode = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC])
    x = mode.from_tensor(torch.randn(4, 8), symbolic_context=dynamic)
    with mode:
        w = torch.randn(8, 3, requires_grad=True)
        tr = tk.trace((x @ w).tanh().sum())
    symbol = str(x.shape[0])
    assert f"44*{symbol} B" in tr.text()
    for save in (tr.to_json, lambda: pickle.dumps(tr)):
        with pytest.raises(tk.TraceFormatError, match=f"symbolic sizes \\(e.g. {symbol}\\)"):
            save()
    with FakeTensorMode():
        a = torch.randn(4, 8, requires_grad=True)
        concrete = tk.trace((a @ torch.randn(8, 3)).tanh().sum())
    assert tk.load_trace(concrete.to_json()).text() == concrete.text()
    assert pickle.loads(pickle.dumps(concrete)).text() == concrete.text()
