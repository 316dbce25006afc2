"""The warm sandbox: a trusted parent that has imported torch, IPython and tracekit once forks a child per run.

The parent (`serve`, started by the grader as a fresh `python -I` process that holds no secret, no
judge and no submission) imports what every run needs, then waits on a socket. For each run the
grader sends a small spec (the leased uid, the cgroup to join, the tmpfs size, the folders to hide)
and three pipe ends (the child's stdin, stdout, stderr); the job itself, with the student's cells
and inputs, goes straight from the grader to the child's stdin and never passes through the parent.

A child, still root and before any student code runs (`enter`): joins the cgroup the grader made
for it, takes its own mount, UTS, IPC, network, cgroup and PID namespaces, builds a root of
read-only binds (the judges and the hidden folders absent) with its own size-capped tmpfs as
`/tmp` and `pivot_root`s into it; then its first process of the new PID namespace mounts `/proc`,
drops every capability, changes to the leased uid, sets no-new-privileges, enters a user namespace
of its own, closes every inherited descriptor and runs the runner (`runner.main`). The parent
reaps its children and tells the grader how each ended. Where the kernel refuses a step, the child
exits before running anything and the grader falls back to a cold sandbox (bubblewrap), saying so.

Memory: pages the child inherits from the parent stay charged to the parent's cgroup until the
child writes them, so a child's cgroup counts what the run itself allocates; the reference answer
of a memory question is measured through the same path, so both carry the same inheritance.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import select
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 4, 24, 38, 47
_SYSCALLS = {"x86_64": {"pivot_root": 155, "capset": 126}, "aarch64": {"pivot_root": 41, "capset": 91}}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
MAX_MESSAGE = 1 << 16
_libc = ctypes.CDLL(None, use_errno=True)


class ParentGone(OSError):
    """The warm parent ended (killed, or its socket closed): the next spawn starts a new one."""


class KernelRefused(OSError):
    """A namespace, mount or privilege step the kernel refused (the warm path is not available)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise KernelRefused(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _syscall(name: str, *args: Any) -> int:
    number = _SYSCALLS.get(platform.machine(), {}).get(name)
    if number is None:
        raise KernelRefused(0, f"{name}: no syscall number known for {platform.machine()}")
    return _libc.syscall(number, *args)


def _prctl(option: int, arg: int = 0) -> int:
    return _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)


# ---- the child, still root: its own namespaces and root file system ----------------------------

def _bind(source: str, target: str, read_only: bool = True) -> None:
    if os.path.isdir(source):
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if not os.path.exists(target):
            open(target, "wb").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _hide_judges(new_root: str, judges: str) -> None:
    """The folder holding the judges, rebuilt without them (absent, not empty: an empty folder
    imports as a namespace package)."""
    parent, name = os.path.dirname(judges), os.path.basename(judges)
    target = new_root + parent
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for entry in sorted(os.listdir(parent)):
        if entry != name:
            try:
                _bind(f"{parent}/{entry}", f"{target}/{entry}")
            except (KernelRefused, FileNotFoundError):
                if os.path.lexists(f"{parent}/{entry}"):  # refused, not gone since it was listed (an editor's
                    raise  # temporary file, a bytecode file written meanwhile): the warm path is refused
    _mount(None, target, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def build_root(new_root: str, spec: dict) -> None:
    """Mount the sandbox's file system under `new_root` (inside this child's own mount namespace)."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    uid = int(spec["uid"])
    tmp = new_root + "/tmp"
    os.mkdir(tmp)
    _mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={int(spec['tmpfs_bytes'])}")
    for sub in ("work", "home"):
        os.mkdir(f"{tmp}/{sub}", 0o755)
        os.chown(f"{tmp}/{sub}", uid, uid)
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), new_root + top)
        elif os.path.isdir(top) and top not in spec["roots"]:
            _bind(top, new_root + top)
    for root in spec["roots"]:
        _bind(root, new_root + root)
    for judges in spec["judges"]:
        _hide_judges(new_root, judges)
    for path in spec["hide"]:
        if os.path.isdir(new_root + path):
            _mount("tmpfs", new_root + path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4k")
            _mount(None, new_root + path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        elif os.path.isfile(new_root + path):
            _mount("/dev/null", new_root + path, None, MS_BIND)
    dev = new_root + "/dev"
    os.mkdir(dev)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=0755,size=64k")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            _bind(f"/dev/{name}", f"{dev}/{name}", read_only=False)
    os.symlink("/tmp", f"{dev}/shm")
    os.mkdir(new_root + "/proc")
    _mount(None, dev, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID)


def _pivot(new_root: str) -> None:
    os.chdir(new_root)
    os.mkdir(".old")
    _check(_syscall("pivot_root", b".", b".old"), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """Empty every capability set of this process (and the ambient set)."""
    _prctl(PR_CAP_AMBIENT, 4)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    _check(_syscall("capset", ctypes.byref(header), data), "capset")


def _drop_bounding_set() -> None:
    for cap in range(64):
        if _prctl(PR_CAPBSET_DROP, cap) != 0:
            break


def become_user(uid: int) -> None:
    """Drop to the leased uid: no capability (bounding set included), no groups, no new privileges,
    then a user namespace of its own mapping only that uid."""
    _drop_bounding_set()
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _prctl(PR_SET_DUMPABLE, 1)  # a change of uid made it undumpable: its /proc/self files would be root's
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1), "no_new_privs")
    _check(_libc.unshare(CLONE_NEWUSER), "a user namespace")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{uid} {uid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    _drop_bounding_set()  # a new user namespace starts with a full one
    _drop_capabilities()
    if os.getuid() != uid or os.geteuid() != uid:
        raise KernelRefused(0, "the uid did not change")


def _init(child: int) -> None:
    """PID 1 of the sandbox, as bubblewrap's is: reap every orphan, end when the runner ends, with
    its status (a runner killed by a signal ends it with 128 + the signal). Nothing of the
    student's runs as PID 1, so a signal the runner sends itself acts as it would anywhere."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(0)
        if pid == child:
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _sandbox_process(spec: dict) -> None:
    """The first process of the new PID namespace: /proc and the uid, then the runner as its child
    (never returns)."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    become_user(int(spec["uid"]))
    os.setsid()
    runner = os.fork()
    if runner != 0:
        for fd in (0, 1, 2):
            os.close(fd)
        _init(runner)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.environ.clear()
    os.environ.update(spec["env"])
    os.chdir("/tmp/work")
    import importlib
    import random

    importlib.invalidate_caches()  # the directory listings the parent cached describe another root
    random.seed()
    import torch

    torch.seed()
    from .runner import main

    main()


def enter(spec: dict) -> None:
    """In a freshly forked child (root): the cgroup, the namespaces, the root; then fork the
    sandbox's first process and wait for it (never returns)."""
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for procs in spec["procs"]:
            with open(procs, "w") as fh:
                fh.write(str(os.getpid()))
        flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWCGROUP
        _check(_libc.unshare(flags), "namespaces")
        name = b"tracekit-sandbox"
        _check(_libc.sethostname(name, len(name)), "hostname")
        build_root(spec["stage"], spec)
        _pivot(spec["stage"])
        pid = os.fork()
        if pid == 0:
            try:
                _sandbox_process(spec)
            except BaseException as err:  # noqa: BLE001 - before any student code: a refused step
                os.write(2, f"tracekit warm sandbox: {err}\n".encode())
            os._exit(96)
        for fd in (0, 1, 2):
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
    except BaseException as err:  # noqa: BLE001
        with contextlib.suppress(OSError):
            os.write(2, f"tracekit warm sandbox: {err}\n".encode())
        os._exit(95)


# ---- the parent: import once, fork per run, reap -------------------------------------------------

def _send(sock: socket.socket, message: dict) -> None:
    sock.send(json.dumps(message).encode())


def _reap(sock: socket.socket, children: set[int]) -> None:
    while children:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status), "maxrss": usage.ru_maxrss})


def serve(fd: int) -> None:
    """The parent's loop: import what every run needs, then fork one child per spec received."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    sock = socket.socket(fileno=fd)
    import IPython.core.interactiveshell  # noqa: F401 - imported once, for every child
    import torch

    import tracekit.exercises  # noqa: F401
    from tracekit.grading import resident, runner  # noqa: F401 - the runner imported once, for every child

    torch.set_num_threads(1)
    resident.keep_libraries_resident()  # what the children run on stays in memory, on the parent's account
    threads = len(os.listdir("/proc/self/task"))
    judges = sorted(m for m in sys.modules if ".judges" in m)
    _send(sock, {"ready": threads == 1 and not judges, "threads": threads, "judges": judges})
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.05)
        _reap(sock, children)
        if not ready:
            continue
        message, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 3)
        if not message:
            for pid in children:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            os._exit(0)
        spec = json.loads(message)
        if len(fds) != 3:
            for extra in fds:
                os.close(extra)
            _send(sock, {"id": spec.get("id"), "error": "three descriptors expected"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            sock.close()
            for target, source in enumerate(fds):
                os.dup2(source, target)
            os.closerange(3, 1 << 16)
            enter(spec)
        for extra in fds:
            os.close(extra)
        children.add(pid)
        _send(sock, {"id": spec["id"], "pid": pid})


# ---- the grader's side ---------------------------------------------------------------------------

@dataclass
class WarmChild:
    """One forked run, as the grader sees it: its pid (outside its namespaces) and, once the parent
    has reaped it, its exit code and its largest resident size."""

    pid: int
    returncode: int | None = None
    maxrss_kib: int | None = None
    ended: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> int | None:
        """The exit code once it ended, else None."""
        return self.returncode

    def kill(self) -> None:
        """SIGKILL the child (its PID namespace goes with it)."""
        if self.returncode is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)


class Zygote:
    """The grader's handle on the warm parent (one per grading process, shared by its threads)."""

    def __init__(self, env: dict[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        package_parent = str(Path(__file__).resolve().parent.parent.parent)
        command = [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {package_parent!r}); "
                   f"from tracekit.grading.zygote import serve; serve({theirs.fileno()})"]
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env, pass_fds=(theirs.fileno(),),
                                     start_new_session=True)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self.pending: dict[int, dict] = {}
        self.children: dict[int, WarmChild] = {}
        self.exits: dict[int, dict] = {}
        self.replied = threading.Condition()
        self.count = 0
        self.alive = True
        self.hello: dict = {}
        ours.settimeout(120)
        try:
            self.hello = json.loads(ours.recv(MAX_MESSAGE) or b"{}")
        except (OSError, ValueError):
            self.hello = {}
        ours.settimeout(None)
        self.ready = bool(self.hello.get("ready"))
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            with self.replied:
                if "exit" in message:
                    self._ended(message)
                else:
                    self.pending[message["id"]] = message
                self.replied.notify_all()
        with self.replied:
            self.alive = False
            for child in self.children.values():
                if child.returncode is None:  # its parent is gone, and it with it (PR_SET_PDEATHSIG)
                    child.returncode = -signal.SIGKILL
                    child.ended.set()
            self.replied.notify_all()

    def _ended(self, message: dict) -> None:
        child = self.children.pop(message["exit"], None)
        if child is None:
            self.exits[message["exit"]] = message  # it ended before its spawn reply was read
            return
        child.maxrss_kib, child.returncode = message["maxrss"], message["code"]
        child.ended.set()

    def spawn(self, spec: dict, stdin: int, stdout: int, stderr: int) -> WarmChild:
        """Fork one sandboxed run with these pipe ends as its stdin, stdout and stderr."""
        with self.lock:
            self.count += 1
            ident = self.count
            try:
                socket.send_fds(self.sock, [json.dumps({**spec, "id": ident}).encode()], [stdin, stdout, stderr])
            except OSError as err:
                self.alive = False
                raise ParentGone(f"the warm parent is gone ({err})") from err
        with self.replied:
            while ident not in self.pending and self.alive:
                self.replied.wait(5)
            reply = self.pending.pop(ident, None)
            if reply is None:
                raise ParentGone("the warm parent is gone")
            if "pid" not in reply:
                raise OSError(reply.get("error", "the warm parent did not fork"))
            child = WarmChild(reply["pid"])
            early = self.exits.pop(child.pid, None)
            if early is not None:
                child.maxrss_kib, child.returncode = early["maxrss"], early["code"]
                child.ended.set()
            else:
                self.children[child.pid] = child
        return child

    def close(self) -> None:
        """Stop the parent (its children are killed with it)."""
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError):
            self.proc.kill()
            self.proc.wait(timeout=10)


_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()
_HELLO: dict[str, Any] = {}


def last_hello() -> str:
    """What the last warm parent said when it started (why it was not ready), in words."""
    if not _HELLO:
        return "it did not answer"
    return f"threads {_HELLO.get('threads')}, judges imported {_HELLO.get('judges')}"


def shared(env: dict[str, str]) -> Zygote | None:
    """This grading process's warm parent, started on first use; None where it cannot start."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is not None and _ZYGOTE.alive and _ZYGOTE.proc.poll() is None:
            return _ZYGOTE
        if _ZYGOTE is not None:
            _ZYGOTE.close()
        zygote = Zygote(env)
        _HELLO.clear()
        _HELLO.update(zygote.hello)
        if not zygote.ready:
            zygote.close()
            return None
        _ZYGOTE = zygote
        return zygote


def stop() -> None:
    """Stop this process's warm parent, if one runs."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is not None:
            _ZYGOTE.close()
            _ZYGOTE = None
