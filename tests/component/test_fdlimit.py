"""The supervisor raises its open-file limit (one descriptor per worker connection)."""

from __future__ import annotations

import subprocess
import sys


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    # In a child process: the limit is the process's own.
    code = (
        "import resource\n"
        "from corral.supervisor.fdlimit import raise_soft_limit\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "before, after = raise_soft_limit()\n"
        "now = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "assert before == 256 and now[0] == after and now[1] == hard, (before, after, now)\n"
        "assert after == (hard if hard != resource.RLIM_INFINITY else 1 << 20), after\n"
        "assert raise_soft_limit() == (after, after)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
