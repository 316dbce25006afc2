"""The program that runs inside a sandbox (`python -I -m tracekit.grading.runner`).

It reads one job (JSON) on stdin and writes JSON lines on the pipe that was its stdout
(its own fd 1 then points at stderr, so nothing the student prints reaches that pipe by
accident). Two modes:

- `run`: the notebook's code cells, one after the other, in an IPython shell (magics work,
  a per-cell timer interrupts endless cells); then the probes of the *data* questions read
  the answer values. What comes back is only the student's own answers, so nothing in it
  is worth forging.
- `probe`: a fresh interpreter for the *code* questions. Before any student code exists, it
  installs an audit hook and snapshots torch and tracekit; then it loads only the answer
  definitions (imports, `def`, `class`, assignments of literal values — no statement that
  calls anything, so no student code runs while loading); then it probes each code
  question, and after each probe checks that nothing was replaced. Introspection that
  could rewrite the probe (frames, tracing, gc walks, ctypes, code objects, process
  spawning, /proc) while student code is on the stack is refused and reported. Every line
  starts with a nonce the trusted grader chose.

The trusted grader never takes a score from here: it judges the observations itself.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import json
import os
import resource
import signal
import sys
from typing import Any

MAX_JOB_BYTES = 64 << 20
STUDENT_FILE = "<submission cell {}>"


def _limits(job: dict) -> None:
    mem = int(job.get("memory_mb", 4096)) << 20
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    fsize = int(job.get("file_mb", 64)) << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if job.get("own_uid"):  # our uid is this sandbox's alone: the per-uid count is the sandbox's count
        nproc = int(job.get("max_pids", 128))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


class CellTimeout(KeyboardInterrupt):
    """The cell ran longer than the per-cell limit."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise CellTimeout("the cell ran longer than the time limit and was interrupted")


def run_cells(job: dict, emit: Any) -> None:
    """Mode `run`: execute the cells, then read the data answers."""
    from dataclasses import replace

    from IPython.core.interactiveshell import InteractiveShell

    import tracekit.exercises as exercises

    exercise = exercises.get(job["exercise"])
    data = replace(exercise, questions=tuple(q for q in exercise.questions if q.kind == "data"))
    probe_all = exercises.probe_all  # taken before any student code: a replacement would not be used
    probes = [(q, q.probe) for q in data.questions]
    shell = InteractiveShell.instance()
    signal.signal(signal.SIGALRM, _on_alarm)
    for index, source in job["cells"]:
        emit({"cell": index})
        signal.setitimer(signal.ITIMER_REAL, float(job.get("cell_timeout", 60)))
        try:
            result = shell.run_cell(source, store_history=False)
        except BaseException as err:  # noqa: BLE001 - e.g. a timer that fired between cells
            emit({"error": [index, type(err).__name__, str(err)[:300]]})
            continue
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        err = result.error_before_exec or result.error_in_exec
        if err is not None:
            emit({"error": [index, type(err).__name__, str(err)[:300]]})
    signal.signal(signal.SIGALRM, _on_alarm)
    for q, probe in probes:
        object.__setattr__(q, "probe", probe)
    signal.setitimer(signal.ITIMER_REAL, float(job.get("probe_timeout", 60)))
    observations = probe_all(data, shell.user_ns, job["inputs"])
    signal.setitimer(signal.ITIMER_REAL, 0)
    emit({"observations": observations})


# ---- probe mode: definitions only ---------------------------------------------------------------

SAFE_CALLS = {"dict", "list", "set", "tuple", "frozenset"}
SAFE_DECORATORS = {"staticmethod", "classmethod", "property"}
CALLABLE_ROOTS = {"torch", "math"}
DENIED_PARTS = {"load", "hub", "ops", "jit", "compile", "utils", "library", "save", "package", "multiprocessing",
                "distributed", "cuda", "backends", "overrides", "fx", "export", "onnx", "testing", "autograd",
                "from_file", "classes"}
FORBIDDEN_MEMBERS = {"__init_subclass__", "__set_name__", "__class_getitem__", "__prepare__", "__mro_entries__"}


def _chain(node: ast.expr) -> list[str] | None:
    """`torch.nn.functional` -> ['torch', 'nn', 'functional']; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _safe_call(node: ast.Call, modules: set[str]) -> bool:
    chain = _chain(node.func)
    if chain is None:
        return False
    if len(chain) == 1:
        ok = chain[0] in SAFE_CALLS
    else:
        ok = (chain[0] in modules and modules_root(chain[0]) in CALLABLE_ROOTS
              and not any(p.startswith(("_", "set_")) or p in DENIED_PARTS for p in chain[1:]))
    return ok and all(_safe_expr(a, modules) for a in node.args) and all(
        k.arg is not None and _safe_expr(k.value, modules) for k in node.keywords)


_ALIASES: dict[str, str] = {}


def modules_root(alias: str) -> str:
    """The top-level module an imported name stands for."""
    return _ALIASES.get(alias, alias)


def _safe_expr(node: ast.expr | None, modules: set[str]) -> bool:
    """Evaluating it runs no student code: literals, names, attribute chains, containers,
    arithmetic on those, and calls of a few torch / math constructors with safe arguments."""
    if node is None or isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, ast.Attribute):
        return _chain(node) is not None and not node.attr.startswith("__")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_safe_expr(e, modules) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(_safe_expr(k, modules) for k in node.keys if k is not None) and all(
            _safe_expr(v, modules) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        return _safe_expr(node.operand, modules)
    if isinstance(node, ast.BinOp):
        return _safe_expr(node.left, modules) and _safe_expr(node.right, modules)
    if isinstance(node, ast.Call):
        return _safe_call(node, modules)
    if isinstance(node, ast.Lambda):  # defining one runs nothing but its defaults
        return _safe_args(node.args, modules)
    return False


def _safe_args(args: ast.arguments, modules: set[str]) -> bool:
    return all(_safe_expr(d, modules) for d in [*args.defaults, *args.kw_defaults])


def _safe_decorator(node: ast.expr, modules: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in SAFE_DECORATORS or (node.id in modules and modules_root(node.id) == "torch")
    if isinstance(node, ast.Attribute) and node.attr in ("setter", "getter", "deleter"):
        return isinstance(node.value, ast.Name)
    chain = _chain(node.func if isinstance(node, ast.Call) else node)
    if chain is None or chain[0] not in modules or modules_root(chain[0]) != "torch":
        return False
    return not isinstance(node, ast.Call) or (not node.args and not node.keywords)


def _safe_function(node: ast.FunctionDef | ast.AsyncFunctionDef, modules: set[str]) -> bool:
    return _safe_args(node.args, modules) and all(_safe_decorator(d, modules) for d in node.decorator_list)


def _safe_class(node: ast.ClassDef, modules: set[str]) -> bool:
    if node.keywords or node.decorator_list or not all(_safe_expr(b, modules) for b in node.bases):
        return False
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if item.name in FORBIDDEN_MEMBERS or not _safe_function(item, modules):
                return False
        elif isinstance(item, ast.ClassDef):
            if not _safe_class(item, modules):
                return False
        elif isinstance(item, ast.Assign):
            if not all(isinstance(t, ast.Name) and t.id not in FORBIDDEN_MEMBERS for t in item.targets) or \
                    not _safe_expr(item.value, modules):
                return False
        elif isinstance(item, ast.AnnAssign):
            if not isinstance(item.target, ast.Name) or not _safe_expr(item.value, modules):
                return False
        elif not (isinstance(item, ast.Pass) or (isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant))):
            return False
    return True


def definitions(cells: list[str]) -> tuple[list[tuple[int, ast.Module]], list[str]]:
    """The top-level statements that only define things (one module per statement), and the
    statements left out, as 'cell N line M'."""
    modules: set[str] = set()
    kept: list[tuple[int, ast.Module]] = []
    dropped: list[str] = []
    for index, source in cells:
        lines = [("pass" if line.lstrip().startswith(("%", "!")) else line) for line in source.splitlines()]
        if lines and lines[0].startswith("%%"):
            continue
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            dropped.append(f"cell {index + 1} (syntax error)")
            continue
        for stmt in tree.body:
            ok = False
            if isinstance(stmt, ast.Import):
                ok = True
                for alias in stmt.names:
                    name = alias.asname or alias.name.split(".")[0]
                    modules.add(name)
                    _ALIASES[name] = alias.name.split(".")[0]
            elif isinstance(stmt, ast.ImportFrom):
                ok = stmt.level == 0 and all(a.name != "*" for a in stmt.names)
                if ok:
                    for alias in stmt.names:
                        modules.add(alias.asname or alias.name)
                        _ALIASES[alias.asname or alias.name] = (stmt.module or "").split(".")[0]
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                ok = _safe_function(stmt, modules)
            elif isinstance(stmt, ast.ClassDef):
                ok = _safe_class(stmt, modules)
            elif isinstance(stmt, ast.Assign):
                ok = all(isinstance(t, (ast.Name, ast.Tuple)) for t in stmt.targets) and _safe_expr(stmt.value, modules)
            elif isinstance(stmt, ast.AnnAssign):
                ok = isinstance(stmt.target, ast.Name) and _safe_expr(stmt.value, modules)
            elif isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                continue
            if ok:
                module = ast.Module(body=[stmt], type_ignores=[])
                kept.append((index, module))
            else:
                dropped.append(f"cell {index + 1} line {stmt.lineno}")
    return kept, dropped


# ---- probe mode: the audit hook ---------------------------------------------------------------

WATCHED_EVENTS = {
    "sys._getframe", "sys._current_frames", "sys._current_exceptions", "sys.settrace", "sys.setprofile",
    "sys.addaudithook", "sys.monitoring.register_callback", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "code.__new__", "function.__new__", "os.system", "os.exec", "os.posix_spawn",
    "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn",
    "cpython.PyInterpreterState_New", "cpython._PySys_ClearAuditHooks", "sys.setrecursionlimit",
}
FRAME_ATTRIBUTES = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"}
DENIED_IMPORTS = {"ctypes", "_ctypes", "signal", "_signal", "faulthandler", "_testcapi", "_xxsubinterpreters"}


def _student_on_stack(start: Any) -> bool:
    """Whether the student's code asked for this: walking out from the caller, a submission
    frame comes before any import machinery (a lazy import inside torch is not the student's)."""
    frame = start
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<submission"):
            return True
        if name.startswith("<frozen importlib"):
            return False
        frame = frame.f_back
    return False


DIRECT_EVENTS = {"exec", "compile", "sys._getframe", "object.__getattr__", "object.__setattr__",
                 "object.__delattr__"}  # flagged only when the student's code itself asks


def _asked_directly(frame: Any) -> bool:
    """The student's own frame made the call (or reached it through `inspect`, which hands frames back)."""
    for _ in range(3):
        if frame is None:
            return False
        name = frame.f_code.co_filename
        if name.startswith("<submission"):
            return True
        if not name.endswith("inspect.py"):
            return False
        frame = frame.f_back
    return False


def _make_hook(report: Any) -> Any:
    """An audit hook that refuses introspection and process tricks while student code runs."""
    getframe = sys._getframe
    busy = [False]

    def hook(event: str, args: tuple) -> None:
        if busy[0]:
            return
        if event in DIRECT_EVENTS:
            if event == "object.__getattr__" and not (len(args) > 1 and args[1] in FRAME_ATTRIBUTES):
                return
        elif not (event in WATCHED_EVENTS or event.startswith(("ctypes.", "cpython.")) or (
                event == "import" and args and str(args[0]).split(".")[0] in DENIED_IMPORTS) or (
                event == "open" and args and str(args[0]).startswith("/proc"))):
            return
        busy[0] = True
        try:
            caller = getframe(1)
            student = _asked_directly(caller) if event in DIRECT_EVENTS else _student_on_stack(caller)
        finally:
            busy[0] = False
        if not student:
            return
        report(event, args)
        raise RuntimeError(f"the grader does not allow {event} while your answer is being checked")

    return hook


WATCHED_TORCH = {
    "torch": ["tensor", "sigmoid", "exp", "sin", "cos", "tanh", "randn", "equal", "allclose", "is_tensor", "Tensor"],
    "torch.autograd": ["grad", "backward", "Function"],
    "torch.autograd.graph": ["saved_tensors_hooks"],
    "torch.Tensor": ["backward", "__eq__", "tolist", "item", "detach", "sum", "untyped_storage", "register_hook"],
    "json": ["dumps", "loads"],
    "builtins": ["print", "isinstance", "type", "len", "float", "int", "str", "list", "dict", "id", "getattr"],
}


def _student_made(value: Any) -> bool:
    """Whether a value came from the submission (its code, its classes, their instances)."""
    for holder in (value, getattr(value, "__func__", None)):
        code = getattr(holder, "__code__", None)
        if code is not None and getattr(code, "co_filename", "").startswith("<submission"):
            return True
    if isinstance(value, type):
        return value.__module__ == "__submission__"
    return type(value).__module__ == "__submission__"


def _snapshot() -> dict[str, dict[str, Any]]:
    """Every attribute of the tracekit modules (and their classes), and the torch functions
    the probes rely on, as the objects they are now."""
    snap: dict[str, dict[str, Any]] = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] != "tracekit":
            continue
        items = dict(vars(module))
        snap[f"module:{name}"] = items
        for k, v in items.items():
            if isinstance(v, type) and v.__module__.startswith("tracekit"):
                snap[f"class:{name}:{k}"] = dict(vars(v))
    for name, attrs in WATCHED_TORCH.items():
        owner: Any = sys.modules.get(name)
        if owner is None and name == "torch.Tensor":
            owner = sys.modules["torch"].Tensor
        if owner is not None:
            snap[f"watched:{name}"] = {a: getattr(owner, a, None) for a in attrs}
    return snap


def _current(key: str) -> dict[str, Any]:
    if key.startswith("watched:"):
        name = key[len("watched:"):]
        owner = sys.modules["torch"].Tensor if name == "torch.Tensor" else sys.modules.get(name)
        return {a: getattr(owner, a, None) for a in WATCHED_TORCH[name]}
    kind, _, rest = key.partition(":")
    if kind == "module":
        module = sys.modules.get(rest)
        return dict(vars(module)) if module is not None else {}
    module_name, _, cls = rest.partition(":")
    owner = getattr(sys.modules.get(module_name), cls, None)
    return dict(vars(owner)) if isinstance(owner, type) else {}


def _changed(before: dict[str, dict[str, Any]]) -> list[str]:
    """What was replaced since the snapshot (in tracekit: anything; in torch: the watched functions),
    plus any torch module attribute that now holds something the submission made."""
    changed = []
    for key, entries in before.items():
        now = _current(key)
        for attr, value in entries.items():
            if now.get(attr, value) is not value:
                changed.append(f"{key.split(':', 1)[1].replace(':', '.')}.{attr}")
    for name, module in list(sys.modules.items()):
        if module is not None and name.split(".")[0] == "torch":
            with contextlib.suppress(Exception):
                changed += [f"{name}.{k}" for k, v in list(vars(module).items()) if _student_made(v)]
    return changed


def probe_code(job: dict, emit: Any) -> None:
    """Mode `probe`: load the answer definitions into a fresh namespace and probe the code questions."""
    import functools  # noqa: F401 - imported before the student's code, like everything it relies on
    from dataclasses import replace

    import torch

    import tracekit
    import tracekit.exercises as exercises

    torch.set_num_threads(1)
    exercise = exercises.get(job["exercise"])
    wanted = set(job["questions"])
    questions = [q for q in exercise.questions if q.kind == "code" and q.name in wanted]
    probes = {q.name: (q.probe, q.answer, q.kind) for q in questions}
    tampered: list[str] = []

    def report(event: str, args: tuple) -> None:
        line = f"{event} {str(args)[:80]}"
        if line not in tampered:
            tampered.append(line)
            emit({"tampered": line})

    hook = _make_hook(report)
    sys.addaudithook(hook)
    import _signal

    def blocked_signal(*args: Any, **kwargs: Any) -> Any:
        report("signal.signal", args[:1])
        raise RuntimeError("the grader does not allow signal handlers while your answer is being checked")

    signal.signal(signal.SIGALRM, _on_alarm)  # a probe that runs too long raises CellTimeout
    signal.signal = _signal.signal = blocked_signal  # a handler would receive the probe's frame
    before = _snapshot()
    namespace: dict[str, Any] = {"__name__": "__submission__", "__builtins__": builtins}
    kept, dropped = definitions(job["cells"])
    failed = []
    for index, module in kept:
        try:
            exec(compile(module, STUDENT_FILE.format(index + 1), "exec", dont_inherit=True,  # noqa: S102
                         flags=__import__("__future__").annotations.compiler_flag), namespace)
        except Exception as err:  # noqa: BLE001 - e.g. an import that is not installed
            failed.append(f"cell {index + 1} line {module.body[0].lineno}: {type(err).__name__}: {err}"[:200])
    emit({"loaded": sorted(k for k in namespace if not k.startswith("__")), "dropped": dropped, "failed": failed})
    signal_alarm = _signal.setitimer
    for q in questions:
        probe, answer_name, _ = probes[q.name]
        emit({"probing": q.name})
        fake = replace(exercise, questions=(q,))
        object.__setattr__(q, "probe", probe)  # the probe as loaded before any student code
        signal_alarm(_signal.ITIMER_REAL, float(job.get("probe_timeout", 60)))
        try:
            obs = exercises.probe_all(fake, namespace, job["inputs"])[q.name]
        except BaseException as err:  # noqa: BLE001 - the student's code may raise anything
            obs = {"error": f"{type(err).__name__}: {err}"[:300], "raised": True}
        finally:
            signal_alarm(_signal.ITIMER_REAL, 0)
        changed = _changed(before)
        for label in changed:
            report("replaced", (label,))
        emit({"question": q.name, "observation": obs})
    del tracekit
    emit({"done": True})


def main() -> None:
    """Read the job, set the limits, run the mode, write the lines."""
    os.closerange(3, 1 << 16)  # nothing inherited but stdin, stdout and stderr
    job = json.loads(sys.stdin.buffer.read(MAX_JOB_BYTES))
    out = os.dup(1)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.set_inheritable(out, False)
    os.chdir(job.get("workdir") or os.getcwd())
    _limits(job)
    prefix = (job.get("nonce", "") + " ").encode() if job.get("nonce") else b""
    write = os.write

    def emit(obj: dict) -> None:
        data = prefix + json.dumps(obj, allow_nan=False, default=str).encode() + b"\n"
        while data:
            data = data[write(out, data):]

    if job["mode"] == "run":
        run_cells(job, emit)
    else:
        probe_code(job, emit)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
