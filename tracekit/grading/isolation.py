"""What isolates one submission: bubblewrap namespaces, an unprivileged uid, a cgroup.

Each sandbox is `[sh: join the cgroup] → [setpriv: drop to a uid of its own] → bwrap` with
its own user, mount, PID, IPC, network and UTS namespaces, a root file system built from
read-only binds of the system, Python and tracekit (with `tracekit/exercises/judges` hidden),
and a size-capped tmpfs as the only writable place. The cgroup (v2, or v1 memory + pids, and
cpu + cpuacct where mounted) limits memory, process count and CPU for the whole sandbox; at the
end the PID namespace's init and every process left in the cgroup are killed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
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

# Each sandbox (as root) gets a uid of its own from this range, leased only when no process and no
# passwd entry has it. 60600-60999 lies in the range systemd leaves unused (its dynamic service
# users take 61184-65519, homed users 60001-60513); TRACEKIT_SANDBOX_UIDS=first-last moves it.
SANDBOX_UID_BASE = 60600
SANDBOX_UID_COUNT = 400


def _uid_range() -> range:
    text = os.environ.get("TRACEKIT_SANDBOX_UIDS", "")
    try:
        first, last = (int(x) for x in text.split("-"))
        if 1000 <= first <= last < 2**31:
            return range(first, last + 1)
    except ValueError:
        pass
    return range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + SANDBOX_UID_COUNT)


SANDBOX_UIDS = _uid_range()
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
    cpu: bool = False  # the cgroup has a cpu controller: a CPU quota and CPU-time accounting per sandbox

    @property
    def full(self) -> bool:
        """Namespaces and a cgroup: everything the threat model in the README relies on."""
        return self.namespaces and self.cgroup is not None

    def describe(self) -> str:
        """One line for the start of a batch and every report."""
        if self.full:
            cpu = " + CPU quota" if self.cpu else ""
            text = (f"isolation: full (unprivileged uid, user/mount/pid/ipc/net namespaces, cgroup {self.cgroup} "
                    f"memory + process limits{cpu})")
            return text if self.cpu else text + "; note: " + "; ".join(self.missing)
        return "WARNING: isolation is INCOMPLETE: " + "; ".join(self.missing)


def _bwrap() -> str | None:
    return shutil.which("bwrap")


_WANTED = ("memory", "pids", "cpu", "cpuacct")


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
            if name in _WANTED:
                found[name] = CGROUP_ROOT / name / rel
    return found


def _try_mkdir(parent: Path) -> bool:
    # a name of this call's own: grading threads probe at once (a shared name made one of them find
    # no cgroup, and its sandbox run without one)
    probe = parent / f"tracekit-probe-{os.getpid()}-{threading.get_native_id()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
        probe.rmdir()
        return True
    except OSError:
        return False


def _cgroup_parents() -> tuple[str | None, dict[str, Path], str]:
    """Where sandbox cgroups can be made: (version, controller -> parent folder, why not). memory and
    pids are needed; cpu (and cpuacct on v1) are used where they can be."""
    dirs = {} if os.environ.get("TRACEKIT_CGROUP") == "none" else _own_cgroup_dirs()  # none: as in a pod
    v2 = dirs.get("v2")
    if v2 is not None and (v2 / "cgroup.subtree_control").exists():
        try:
            control = v2 / "cgroup.subtree_control"
            enabled = control.read_text().split()
            for name in ("memory", "pids", "cpu"):
                if name not in enabled:
                    with contextlib.suppress(OSError):
                        control.write_text(f"+{name}")
            enabled = control.read_text().split()
            if {"memory", "pids"} <= set(enabled) and _try_mkdir(v2):
                parents = {"memory": v2, "pids": v2}
                if "cpu" in enabled:
                    parents["cpu"] = v2
                return "v2", parents, ""
        except OSError:
            pass
    if "memory" in dirs and "pids" in dirs and all(_try_mkdir(dirs[c]) for c in ("memory", "pids")):
        parents = {c: dirs[c] for c in ("memory", "pids")}
        if "cpu" in dirs and "cpuacct" in dirs and all(_try_mkdir(dirs[c]) for c in ("cpu", "cpuacct")):
            parents.update(cpu=dirs["cpu"], cpuacct=dirs["cpuacct"])
        return "v1", parents, ""
    if os.geteuid() == 0:
        limits = ("each sandbox has a uid of its own, so its process count is limited (RLIMIT_NPROC), and its "
                  "memory per process (RLIMIT_AS) and in total (the grader sums its processes' memory every "
                  "0.2 s and kills it past --memory)")
    else:
        limits = ("a sandbox's processes and total memory are not limited (refused without --unsafe; with it, "
                  "memory is limited per process only)")
    why = ("no writable cgroup with memory and pids controllers (cgroup v2 needs them delegated to this "
           "process's cgroup, e.g. `systemd-run --scope -p Delegate=yes`, or cgroup v1 memory + pids "
           f"mounted writable): {limits}; no CPU quota, and the time limit counts wall time")
    return None, {}, why


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
            argv = _wrap(["/bin/true"], [], 64 << 20, SANDBOX_UIDS[-1], stage)
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        finally:
            remove_stage(stage)
        namespaces = done.returncode == 0
        if not namespaces:
            missing.append("bubblewrap cannot create user/mount/pid/net namespaces here "
                           f"({done.stderr.strip()[:200] or done.returncode}); allow unprivileged user namespaces")
    version, parents, why = _cgroup_parents()
    if version is None:
        missing.append(why)
    cpu = "cpu" in parents
    if version is not None and not cpu:
        missing.append("the cgroup has no cpu controller: no CPU quota per sandbox, and the time limit counts "
                       "wall time (a submission's processes can slow the ones graded beside it)")
    return Isolation(root, namespaces, version, tuple(missing), cpu)


LEASES = Path("/run/tracekit-sandbox-uids")  # root only: one lock file per uid in use


def next_uid() -> int:
    """The next uid of the sandbox range to try (see `lease_uid` for the checks)."""
    with _UID_LOCK:
        return SANDBOX_UIDS[next(_UIDS) % len(SANDBOX_UIDS)]


def uid_in_use(uid: int) -> str | None:
    """Why this uid is not free on this machine (a passwd entry, a process), or None."""
    import pwd

    try:
        return f"the user {pwd.getpwuid(uid).pw_name!r} has it"
    except KeyError:
        pass
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    return f"process {entry} runs as it"
    return None


def lease_uid() -> tuple[int, int | None]:
    """A sandbox uid that no other sandbox on this machine, of any grader process, holds now, and
    that no user and no process has: (uid, descriptor of its lock; close it to give the uid back).
    Not root: (own uid, None)."""
    import fcntl

    if os.geteuid() != 0:
        return os.getuid(), None
    LEASES.mkdir(mode=0o700, exist_ok=True)
    busy = 0
    for _ in range(2 * len(SANDBOX_UIDS)):
        uid = next_uid()
        fd = os.open(LEASES / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if uid_in_use(uid) is None:
            return uid, fd
        busy += 1
        os.close(fd)
    raise RuntimeError(f"no free sandbox uid in {SANDBOX_UIDS.start}-{SANDBOX_UIDS.stop - 1} ({busy} taken by users "
                       "or processes of this machine): lower --jobs or set TRACEKIT_SANDBOX_UIDS=first-last")


class Cgroup:
    """One sandbox's cgroup: a v2 folder, or v1 folders per controller (memory, pids; cpu and
    cpuacct where the machine has them)."""

    def __init__(self, version: str, dirs: dict[str, Path]) -> None:
        self.version = version
        self.by_controller = dirs
        self.dirs = list(dict.fromkeys(dirs.values()))  # v2: one folder for all

    @classmethod
    def create(cls, name: str, memory_bytes: int, max_pids: int, cpus: float | None = None) -> Cgroup | None:
        """Make and limit a fresh cgroup (memory, processes, and a CPU quota of `cpus` CPUs where
        there is a cpu controller); None when the machine gives none."""
        version, parents, _ = _cgroup_parents()
        if version is None:
            return None
        dirs = {c: p / name for c, p in parents.items()}
        group = cls(version, dirs)
        for d in group.dirs:
            d.mkdir()
        mem, pids = dirs["memory"], dirs["pids"]
        if version == "v2":
            group._write(mem / "memory.max", memory_bytes)
            with contextlib.suppress(OSError):
                group._write(mem / "memory.swap.max", 0)
            group._write(pids / "pids.max", max_pids)
        else:
            group._write(mem / "memory.limit_in_bytes", memory_bytes)
            with contextlib.suppress(OSError):
                group._write(mem / "memory.memsw.limit_in_bytes", memory_bytes)
            group._write(pids / "pids.max", max_pids)
        if "cpu" in dirs:
            group._limit_cpu(dirs["cpu"], cpus)
        return group

    def _limit_cpu(self, folder: Path, cpus: float | None) -> None:
        """Equal CPU weight for every sandbox, and at most `cpus` CPUs' worth of time per period."""
        if self.version == "v2":
            self._write(folder / "cpu.weight", 100)
            if cpus:
                self._write(folder / "cpu.max", f"{max(1000, int(cpus * 100000))} 100000")
            return
        self._write(folder / "cpu.shares", 1024)
        if cpus:
            try:
                period = int((folder / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                period = 100000
            self._write(folder / "cpu.cfs_quota_us", max(1000, int(cpus * period)))

    def cpu_seconds(self) -> float | None:
        """CPU time every process of the sandbox has used so far (None without CPU accounting)."""
        try:
            if self.version == "v2":
                stats = dict(line.split() for line in (self.dirs[0] / "cpu.stat").read_text().splitlines())
                return int(stats["usage_usec"]) / 1e6
            if "cpuacct" in self.by_controller:
                return int((self.by_controller["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError, KeyError):
            pass
        return None

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
        mem = self.by_controller.get("memory", self.dirs[0])
        try:
            if self.version == "v2":
                events = dict(line.split() for line in (mem / "memory.events").read_text().splitlines())
                return int(events.get("oom_kill", 0)) > 0
            return int((mem / "memory.failcnt").read_text()) > 0
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
    for parent in dict.fromkeys(_cgroup_parents()[1].values()):
        for folder in parent.glob("tracekit-*-*-*"):
            pid = folder.name.split("-")[1]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}") and not Cgroup("", {"x": folder}).pids():
                with contextlib.suppress(OSError):
                    folder.rmdir()
                    removed += 1
    return removed


def read_only_roots() -> list[str]:
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
    roots = read_only_roots()
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
        if any(path == r or path.startswith(r + "/") for r in roots):
            if os.path.isdir(path):
                argv += ["--tmpfs", path, "--remount-ro", path]
            elif os.path.isfile(path):
                argv += ["--ro-bind", "/dev/null", path]  # a file (the secret): empty
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
