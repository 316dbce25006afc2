"""The sandbox kernel launcher: limits, hidden folders, then an ordinary IPython kernel.

    python -m tracekit.grading.kernel --memory-mb 4096 [--hide DIR ...] -f CONNECTION_FILE

Run under `unshare --mount` (as root), `--hide` mounts an empty tmpfs over each folder, so
the student's code can neither read nor change other submissions, the results, or the
reference solutions. Memory (address space), file size and core dumps are limited.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys


def hide(paths: list[str]) -> list[str]:
    """Mount an empty read-only tmpfs over each path (needs a private mount namespace)."""
    hidden = []
    for path in paths:
        if os.path.isdir(path):
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=4k", "tracekit-hidden", path],
                                  capture_output=True, check=False)
            if done.returncode == 0:
                hidden.append(path)
    return hidden


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="tracekit-sandbox-kernel")
    parser.add_argument("--memory-mb", type=int, default=4096)
    parser.add_argument("--hide", action="append", default=[])
    parser.add_argument("-f", dest="connection_file", required=True)
    args = parser.parse_args(argv)
    if os.environ.get("TRACEKIT_SANDBOX_NS") == "1":
        hide(args.hide)
    limit = args.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024 * 1024, 256 * 1024 * 1024))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.argv = ["ipykernel_launcher", "-f", args.connection_file]
    from ipykernel.kernelapp import launch_new_instance

    launch_new_instance()


if __name__ == "__main__":
    main()
