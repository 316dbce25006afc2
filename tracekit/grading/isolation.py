"""What isolates one submission: bubblewrap namespaces, an unprivileged uid, a cgroup.

Each sandbox is `[sh: join the cgroup] → [setpriv: drop to a uid of its own] → bwrap` with
its own user, mount, PID, IPC, network and UTS namespaces, a root file system built from
read-only binds of the system, Python and tracekit (with `tracekit/exercises/judges` hidden),
and a size-capped tmpfs as the only writable place. The cgroup (v2, or v1 memory + pids)
limits memory and process count for the whole sandbox; at the end the PID namespace's init
and every process left in the cgroup are killed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import tracekit

SANDBOX_UID_BASE = 61000  # each sandbox gets its own uid from 61000 ... 61999 (never root)
_UIDS = itertools.count()
_UID_LOCK = threading.Lock()
CGROUP_ROOT = Path("/sys/fs/cgroup")
_JOIN = 'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 97; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class Isolation:
    """What this machine can give a sandbox."""

    root: bool
    namespaces: bool  # bwrap: user, mount, pid, ipc, net, uts namespaces work
    cgroup: str | None  # "v2", "v1" (memory + pids hierarchies) or None
    missing: tuple[str, ...] = ()  # what is not available, in words

    @property
    def full(self) -> bool:
        """Namespaces and a cgroup: everything the threat model in the README relies on."""
        return self.namespaces and self.cgroup is not None

    def describe(self) -> str:
        """One line for the start of a batch and every report."""
        if self.full:
            return (f"isolation: full (unprivileged uid, user/mount/pid/ipc/net namespaces, cgroup {self.cgroup} "
                    "memory + process limits)")
        return "WARNING: isolation is INCOMPLETE: " + "; ".join(self.missing)


def _bwrap() -> str | None:
    return shutil.which("bwrap")


def _own_cgroup_dirs() -> dict[str, Path]:
    """controller -> this process's cgroup folder ('v2' for the unified hierarchy)."""
    found: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    unified = CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").exists() else CGROUP_ROOT / "unified"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = path.lstrip("/")
        if controllers == "":
            found["v2"] = unified / rel
        for name in controllers.split(","):
            if name in ("memory", "pids"):
                found[name] = CGROUP_ROOT / name / rel
    return found


def _try_mkdir(parent: Path) -> bool:
    probe = parent / f"tracekit-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def _cgroup_parents() -> tuple[str | None, list[Path], str]:
    """Where sandbox cgroups can be made: (version, parent folders, why not)."""
    dirs = _own_cgroup_dirs()
    v2 = dirs.get("v2")
    if v2 is not None and (v2 / "cgroup.subtree_control").exists():
        try:
            enabled = (v2 / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                (v2 / "cgroup.subtree_control").write_text("+memory +pids")
                enabled = (v2 / "cgroup.subtree_control").read_text().split()
            if {"memory", "pids"} <= set(enabled) and _try_mkdir(v2):
                return "v2", [v2], ""
        except OSError:
            pass
    if "memory" in dirs and "pids" in dirs and all(_try_mkdir(dirs[c]) for c in ("memory", "pids")):
        return "v1", [dirs["memory"], dirs["pids"]], ""
    why = ("no writable cgroup with memory and pids controllers (cgroup v2 needs them delegated to this "
           "process's cgroup, e.g. `systemd-run --scope -p Delegate=yes`, or cgroup v1 memory + pids "
           "mounted writable): memory is capped per process only and the process count by RLIMIT_NPROC")
    return None, [], why


@lru_cache(maxsize=1)
def detect() -> Isolation:
    """Find out, once, what isolation this machine gives (runs a tiny sandbox to be sure)."""
    root = os.geteuid() == 0
    missing = []
    namespaces = False
    if _bwrap() is None:
        missing.append("bubblewrap (bwrap) is not installed, so there are no namespaces: the student's code "
                       "can see the file system and processes (install it: apt-get install bubblewrap)")
    else:
        stage = new_stage()
        try:
            argv = _wrap(["/bin/true"], [], 64 << 20, SANDBOX_UID_BASE + 999, stage)
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        finally:
            remove_stage(stage)
        namespaces = done.returncode == 0
        if not namespaces:
            missing.append("bubblewrap cannot create user/mount/pid/net namespaces here "
                           f"({done.stderr.strip()[:200] or done.returncode}); allow unprivileged user namespaces")
    version, _, why = _cgroup_parents()
    if version is None:
        missing.append(why)
    return Isolation(root, namespaces, version, tuple(missing))


LEASES = Path("/run/tracekit-sandbox-uids")  # root only: one lock file per uid in use


def next_uid() -> int:
    """A uid no other sandbox of this process has (see `lease_uid` across processes)."""
    with _UID_LOCK:
        return SANDBOX_UID_BASE + next(_UIDS) % 999


def lease_uid() -> tuple[int, int | None]:
    """A sandbox uid that no other sandbox on this machine, of any grader process, holds now:
    (uid, descriptor of its lock; close it to give the uid back). Not root: (own uid, None)."""
    import fcntl

    if os.geteuid() != 0:
        return os.getuid(), None
    LEASES.mkdir(mode=0o700, exist_ok=True)
    for _ in range(3 * 999):
        uid = next_uid()
        fd = os.open(LEASES / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return uid, fd
        except OSError:
            os.close(fd)
    raise RuntimeError("all 999 sandbox uids are in use: lower --jobs")


class Cgroup:
    """One sandbox's cgroup (v2 folder, or v1 memory + pids folders)."""

    def __init__(self, version: str, dirs: list[Path]) -> None:
        self.version = version
        self.dirs = dirs

    @classmethod
    def create(cls, name: str, memory_bytes: int, max_pids: int) -> Cgroup | None:
        """Make and limit a fresh cgroup; None when the machine gives none."""
        version, parents, _ = _cgroup_parents()
        if version is None:
            return None
        dirs = [p / name for p in parents]
        for d in dirs:
            d.mkdir()
        group = cls(version, dirs)
        if version == "v2":
            group._write(dirs[0] / "memory.max", memory_bytes)
            with contextlib.suppress(OSError):
                group._write(dirs[0] / "memory.swap.max", 0)
            group._write(dirs[0] / "pids.max", max_pids)
        else:
            group._write(dirs[0] / "memory.limit_in_bytes", memory_bytes)
            with contextlib.suppress(OSError):
                group._write(dirs[0] / "memory.memsw.limit_in_bytes", memory_bytes)
            group._write(dirs[1] / "pids.max", max_pids)
        return group

    @staticmethod
    def _write(path: Path, value: int | str) -> None:
        path.write_text(str(value))

    @property
    def procs_files(self) -> list[str]:
        """Files the launcher writes its pid into (so all it starts is inside)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> set[int]:
        """Processes still in the cgroup."""
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
        return found

    def oom_killed(self) -> bool:
        """Whether the memory limit killed something in it."""
        try:
            if self.version == "v2":
                events = dict(line.split() for line in (self.dirs[0] / "memory.events").read_text().splitlines())
                return int(events.get("oom_kill", 0)) > 0
            return int((self.dirs[0] / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def memory_peak(self) -> int | None:
        """The most memory the whole cgroup used at once (the kernel's own high-water mark, page
        cache and tmpfs included); None where the kernel does not keep one."""
        name = "memory.peak" if self.version == "v2" else "memory.max_usage_in_bytes"
        try:
            return int((self.dirs[0] / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill_all(self, seconds: float = 10.0) -> bool:
        """SIGKILL everything in it until it is empty; True when nothing is left."""
        deadline = time.monotonic() + seconds
        if self.version == "v2" and (self.dirs[0] / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                self._write(self.dirs[0] / "cgroup.kill", 1)
        while True:
            left = self.pids()
            if not left:
                return True
            if time.monotonic() > deadline:
                return False
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)

    def remove(self) -> None:
        """Delete the (empty) cgroup folders."""
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def remove_stale_cgroups() -> int:
    """Remove the empty sandbox cgroups a grader that was killed left behind; how many."""
    removed = 0
    for parent in _cgroup_parents()[1]:
        for folder in parent.glob("tracekit-*-*-*"):
            pid = folder.name.split("-")[1]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}") and not Cgroup("", [folder]).pids():
                with contextlib.suppress(OSError):
                    folder.rmdir()
                    removed += 1
    return removed


def _read_only_roots() -> list[str]:
    """What the sandbox sees (read-only): the system, Python, and the installed packages it imports."""
    import IPython
    import torch

    roots: list[str] = []
    candidates = ["/usr", "/etc", sys.base_prefix, sys.prefix, os.path.realpath(sys.base_prefix),
                  str(Path(tracekit.__file__).resolve().parent)]
    candidates += [str(Path(m.__file__).resolve().parent.parent) for m in (torch, IPython)]
    for path in candidates:
        path = os.path.normpath(path)
        if os.path.isdir(path) and not any(path == r or path.startswith(r + "/") for r in roots):
            roots = [r for r in roots if not r.startswith(path + "/")] + [path]
    return roots


def hidden_inside_package() -> list[str]:
    """Folders of the tracekit package that hold the truth: never visible in a sandbox."""
    judges = Path(tracekit.__file__).resolve().parent / "exercises" / "judges"
    return [str(judges)] if judges.is_dir() else []


_STAGE = 'stage=$1; shift; i=0; while [ "$1" != -- ]; do mount --bind "$1" "$stage/$i" || exit 96; ' \
    'i=$((i + 1)); shift; done; shift; exec "$@"'


def _wrap(command: list[str], hide: list[str], tmpfs_bytes: int, uid: int, stage: Path | None) -> list[str]:
    """The argv that runs `command` in a fresh bubblewrap sandbox. As root, a private mount
    namespace first binds each read-only folder under `stage` (an empty root-owned 0755 folder),
    so that bwrap, already running as the sandbox's uid, can reach folders like /root/.pyenv."""
    roots = _read_only_roots()
    argv: list[str] = []
    sources = roots
    if os.geteuid() == 0:
        if stage is None:
            raise ValueError("a root sandbox needs a staging folder")
        for i in range(len(roots)):
            (stage / str(i)).mkdir()
        sources = [str(stage / str(i)) for i in range(len(roots))]
        argv += ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _STAGE, "sh", str(stage),
                 *roots, "--", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs", "--pdeathsig", "KILL", "--"]
    argv += [_bwrap() or "bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net",
             "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
             "--hostname", "tracekit-sandbox", "--size", str(tmpfs_bytes), "--tmpfs", "/tmp"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top) and top not in roots:
            argv += ["--ro-bind", top, top]
    for source, path in zip(sources, roots):
        argv += ["--ro-bind", source, path]
    for path in hidden_inside_package():  # absent, not empty: an empty folder imports as a namespace package
        parent, name = os.path.dirname(path), os.path.basename(path)
        root_index = next(i for i, r in enumerate(roots) if parent == r or parent.startswith(r + "/"))
        source_parent = sources[root_index] + parent[len(roots[root_index]):]
        argv += ["--tmpfs", parent]
        for entry in sorted(os.listdir(parent)):
            if entry != name:
                argv += ["--ro-bind", f"{source_parent}/{entry}", f"{parent}/{entry}"]
        argv += ["--remount-ro", parent]
    for path in hide:
        path = os.path.normpath(path)
        if os.path.isdir(path) and any(path == r or path.startswith(r + "/") for r in roots):
            argv += ["--tmpfs", path, "--remount-ro", path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--dir", "/tmp/work", "--dir", "/tmp/home", "--chdir", "/tmp/work",
             "--", *command]
    return argv


def new_stage() -> Path | None:
    """An empty root-owned folder the sandbox's private mount namespace binds into (root only)."""
    if os.geteuid() != 0:
        return None
    import tempfile

    stage = Path(tempfile.mkdtemp(prefix="tracekit-stage-"))
    stage.chmod(0o755)
    return stage


def remove_stage(stage: Path | None) -> None:
    """Delete a staging folder (its binds lived only in the sandbox's own mount namespace)."""
    if stage is not None:
        shutil.rmtree(stage, ignore_errors=True)


def launcher(command: list[str], iso: Isolation, group: Cgroup | None, hide: list[str], tmpfs_bytes: int,
             uid: int, stage: Path | None) -> list[str]:
    """The full argv: join the cgroup, then drop privileges and enter the namespaces (where available)."""
    if iso.namespaces:
        inner = _wrap(command, hide, tmpfs_bytes, uid, stage)
    elif os.geteuid() == 0:
        inner = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs", "--pdeathsig", "KILL", "--", *command]
    else:
        inner = list(command)
    cg = group.procs_files if group else []
    return ["/bin/sh", "-c", _JOIN, "sh", *cg, "--", *inner]
