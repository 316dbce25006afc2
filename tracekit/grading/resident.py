"""Keep the libraries the sandboxes run on in memory, charged to the grader, before any sandbox runs.

A cgroup is charged for every page it brings into the page cache, file pages included: a sandbox
that happens to be the first to run code of torch's libraries after their pages were evicted (a
big install beside the grader is enough) pays for reading them, up to ~200 MiB measured, which a
memory question then counts as the answer's. The grader maps the same libraries (it imported
torch): touching every page of its file mappings once brings them in on its own account and keeps
them mapped, so the sandboxes, warm or cold, find them there and are charged only for what their
own code allocates. The reference answer's run and the submission's are then measured alike.

Mapped pages are still evicted under memory pressure (measured: a process that took all but 400 MiB
of memory for a moment made the next reference run count 372 MiB instead of 202), so where the
kernel allows it (root, or a large enough RLIMIT_MEMLOCK) the read-only mappings are also locked:
they stay in memory for as long as the grader's process lives. Locks are not inherited by a fork,
so the sandboxes lock nothing. Without the lock, the pages are brought in once and may leave again.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools

MADV_POPULATE_READ = 22  # Linux 5.14: fault the pages in (mapped), as a read would


def _file_mappings() -> list[tuple[int, int, str, int, bool]]:
    """(start, end, path, file offset, writable) of this process's readable mappings of regular files."""
    found = []
    try:
        lines = open("/proc/self/maps", encoding="utf-8", errors="replace").read().splitlines()  # noqa: SIM115
    except OSError:
        return []
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[5].startswith("/") or parts[5].startswith("/dev/") or "r" not in parts[1]:
            continue
        if parts[5].endswith(" (deleted)"):
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        found.append((start, end, parts[5], int(parts[2], 16), "w" in parts[1]))
    return found


@functools.cache
def keep_libraries_resident() -> int:
    """Bring every page of this process's file mappings into memory and lock the read-only ones there
    where allowed, once per process; the bytes touched (0 where the kernel offers no way: then the page
    cache is left as it is)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    touched = 0
    for start, end, path, offset, writable in _file_mappings():
        # a lock brings the pages in itself; it is refused without the privilege (then populated only), and
        # not asked for a writable private mapping (it would fault each page in for writing: a copy)
        if (not writable and libc.mlock(start, end - start) == 0) or \
                libc.madvise(start, end - start, MADV_POPULATE_READ) == 0:
            touched += end - start
            continue
        # older kernels: read the range, so that its pages are in the page cache on our account
        with contextlib.suppress(OSError), open(path, "rb", buffering=0) as f:
            f.seek(offset)
            left = end - start
            while left > 0:
                chunk = f.read(min(left, 1 << 22))
                if not chunk:
                    break
                left -= len(chunk)
                touched += len(chunk)
    return touched
