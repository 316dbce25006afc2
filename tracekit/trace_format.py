"""A trace as JSON: the record and the observed lifetimes, versioned (docs/trace-format.md).

`dump(trace)` writes what `load(text)` reads back exactly: `load(dump(tr)).record == tr.record`.
Tables are `{"fields": [...], "rows": [[...], ...]}` and are read by field name, so a reader
of this version tolerates fields added later. A loaded trace has no graph: it renders, compares
and predicts, but `backward()` raises GraphReleasedError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .errors import TraceFileError, TraceFormatError
from .lifetimes import OBSERVED, Lifetime, Lifetimes
from .rows import (
    FORMAT_VERSION,
    CachedValue,
    HeldIn,
    Mutation,
    NodeRow,
    Record,
    ResidualRow,
    Role,
    Status,
    StorageRow,
)

FORMAT = "tracekit-trace"
_LIFETIME_FIELDS = ("released_at", "freed_at", "held_by", "note")


def _table(rows: tuple[tuple[Any, ...], ...], fields: tuple[str, ...]) -> dict[str, Any]:
    return {"fields": list(fields), "rows": [list(r) for r in rows]}


def _mutation(m: Mutation) -> list[Any]:
    return [m.call, m.source, list(m.storage), m.version]


def to_dict(rec: Record, lt: Lifetimes | None = None) -> dict[str, Any]:
    """The record and the observed lifetimes (if any) as plain JSON-ready data."""
    residuals = [r._replace(modified_by=[_mutation(m) for m in r.modified_by]) for r in rec.residuals]
    out: dict[str, Any] = {
        "format": FORMAT,
        "version": rec.version,
        "nodes": _table(rec.nodes, NodeRow._fields),
        "residuals": _table(tuple(residuals), ResidualRow._fields),
        "storages": _table(rec.storages, StorageRow._fields),
        "leaves": [list(p) for p in rec.leaves],
        "leaf_roles": [[k, v.value] for k, v in rec.leaf_roles],
        "outputs": [list(p) for p in rec.outputs],
        "captured": rec.captured,
        "mutations": [_mutation(m) for m in rec.mutations],
        "without_data": rec.without_data,
        "cache": [[c.op, list(c.shape), c.dtype, c.nbytes, list(c.key)] for c in rec.cache],
        "observed": None,
    }
    if lt is not None:
        out["observed"] = {
            "order": list(lt.order),
            "residuals": _table(tuple((x.released_at, x.freed_at, x.held_by, x.note) for x in lt.residuals),
                                _LIFETIME_FIELDS),
            "released": [list(s) for s in lt.released], "freed": [list(s) for s in lt.freed],
            "retained": lt.retained, "error": lt.error,
        }
    return out


def dump(record: Record, observed: Lifetimes | None = None, path: str | Path | None = None) -> str:
    """The record and the observed lifetimes as JSON text (written to `path` when given)."""
    text = json.dumps(to_dict(record, observed), separators=(",", ":"), default=_not_json)
    if path is not None:
        _write(Path(path).expanduser(), text)
    return text


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _symbolic(value: Any) -> TraceFormatError:
    return TraceFormatError(
        f"this trace has symbolic sizes (e.g. {value}): a saved trace holds numbers only. Trace it with "
        "concrete shapes (a FakeTensorMode without a ShapeEnv, or the meta device) to save it.")


def _not_json(value: Any) -> Any:
    """json.dumps's fallback: a symbolic size (a trace under FakeTensorMode with a ShapeEnv) is named."""
    if isinstance(value, _SYMBOLIC):
        raise _symbolic(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def check_savable(rec: Record) -> None:
    """TraceFormatError where a trace of fake tensors holds a symbolic size (pickle cannot keep one)."""
    if rec.without_data != "fake":
        return
    for r in rec.residuals:
        for value in (*(r.shape or ()), r.nbytes):
            if isinstance(value, _SYMBOLIC):
                raise _symbolic(value)


def _write(path: Path, text: str) -> None:
    """`text` into the file `path` (any file: a link's target, a pipe, /dev/stdout), its folders made
    if missing; TraceFileError for a folder given as the file, a file in the way of a folder, or a
    write that fails."""
    try:
        if path.is_dir():
            example = str(path / "trace.json")
            raise TraceFileError(f"{path} is a folder: give the file to write, e.g. tr.to_json({example!r}).")
        in_the_way = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)
        if in_the_way is not None:
            raise TraceFileError(f"cannot write {path}: {in_the_way} is a file, not a folder.")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except TraceFileError:
        raise
    except OSError as err:  # e.g. no permission, a full disk, a name too long
        raise TraceFileError(f"cannot write {path}: {err.strerror or err}.") from err


def _tuples(value: Any) -> Any:
    """JSON lists back to the record's tuples, all the way down."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _rows(table: dict[str, Any], kind: Any, convert: dict[str, Any]) -> tuple[Any, ...]:
    fields = table["fields"]
    missing = [f for f in kind._fields if f not in fields and f not in kind._field_defaults]
    if missing:
        raise TraceFormatError(f"the trace file's {kind.__name__} rows lack {missing}: it is not a tracekit trace.")
    present = [f for f in kind._fields if f in fields]  # a field added later with a default may be absent
    at = [fields.index(f) for f in present]
    out = []
    for row in table["rows"]:
        values = {f: _tuples(row[i]) for f, i in zip(present, at)}
        for f, fn in convert.items():
            values[f] = fn(values[f])
        out.append(kind(**values))
    return tuple(out)


def _mutations(rows: Any) -> tuple[Mutation, ...]:
    return tuple(Mutation(call, source, tuple(key), version) for call, source, key, version in rows)


def _optional_role(v: str | None) -> Role | None:
    return None if v is None else Role(v)


def from_dict(data: dict[str, Any]) -> tuple[Record, Lifetimes | None]:
    """The record and the observed lifetimes (None if none) from `to_dict`'s data."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TraceFormatError("this is not a tracekit trace file (no \"format\": \"tracekit-trace\").")
    if data.get("version") != FORMAT_VERSION:
        raise TraceFormatError(f"this trace file is format version {data.get('version')}; this tracekit reads "
                               f"version {FORMAT_VERSION}: load it with the tracekit that wrote it.")
    try:
        return _from_checked(data)
    except TraceFormatError:
        raise
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise TraceFormatError(f"this trace file is damaged or incomplete ({type(err).__name__}: {err}): "
                               "write it again with tr.to_json(path).") from None


def _from_checked(data: dict[str, Any]) -> tuple[Record, Lifetimes | None]:
    """from_dict, once the format and version are known to be this tracekit's."""
    record = Record.from_rows(
        _rows(data["nodes"], NodeRow, {}),
        _rows(data["residuals"], ResidualRow, {"place": HeldIn, "status": Status, "kind": Role,
                                               "modified_by": _mutations}),
        _rows(data["storages"], StorageRow, {"leaf_role": _optional_role}),
        _tuples(data["leaves"]),
        tuple((k, Role(v)) for k, v in data["leaf_roles"]),
        _tuples(data["outputs"]),
        data["captured"],
        _mutations(data["mutations"]),
        data["without_data"],
        tuple(CachedValue(op, tuple(shape), dtype, nbytes, tuple(key)) for op, shape, dtype, nbytes, key
              in data["cache"]),
    )
    observed = data.get("observed")
    lifetimes = None
    if observed is not None:
        table = observed["residuals"]
        at = [table["fields"].index(f) for f in _LIFETIME_FIELDS]
        lifetimes = Lifetimes(OBSERVED, tuple(observed["order"]),
                              tuple(Lifetime(OBSERVED, *(row[i] for i in at)) for row in table["rows"]),
                              _tuples(observed["released"]), _tuples(observed["freed"]),
                              observed["retained"], observed["error"])
    return record, lifetimes


def load(source: str | Path) -> tuple[Record, Lifetimes | None]:
    """The record and observed lifetimes from a JSON file written by `tr.to_json(path)` (or from the
    JSON text itself); trace.load_trace makes the trace."""
    if isinstance(source, (bytes, bytearray)):
        text = source.decode("utf-8", errors="replace")
    else:
        text = str(source)
        if isinstance(source, Path) or not text.lstrip().startswith("{"):
            text = _read(Path(source).expanduser())
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceFormatError(f"this trace file is not valid JSON ({err}): a file cut short, or not one "
                               "that tr.to_json(path) wrote.") from None
    return from_dict(data)


def _read(path: Path) -> str:
    """The text of the trace file `path`; TraceFileError for a folder or no such file."""
    shown = str(path) if len(str(path)) <= 200 else str(path)[:200] + "..."
    try:
        return path.read_text()
    except IsADirectoryError:
        raise TraceFileError(f"{shown} is a folder: give the trace file that tr.to_json(path) wrote in it.") from None
    except FileNotFoundError:
        raise TraceFileError(f"no such trace file: {shown} (give the path tr.to_json(path) wrote, or the "
                             "JSON text itself).") from None
    except OSError as err:  # e.g. text that is neither JSON nor a path: "File name too long"
        raise TraceFileError(f"cannot read {shown} as a trace file: {err.strerror or err}.") from None
    except UnicodeDecodeError:
        raise TraceFormatError(f"{shown} is not a trace file: it is not text.") from None
