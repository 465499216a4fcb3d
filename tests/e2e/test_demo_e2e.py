"""scripts/demo as a new user runs it (issue 32): from a terminal, the dashboard whose URL it
prints is still there when they read it, until they press Enter; then everything stops."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ..support import wait_until

pytestmark = pytest.mark.e2e

DEMO = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "api/state", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.mark.timeout(150)
def test_the_demo_keeps_its_dashboard_up_until_enter() -> None:
    main, child = pty.openpty()  # a terminal on stdin: the demo waits for Enter
    proc = subprocess.Popen([sys.executable, str(DEMO)], stdin=child, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    os.close(child)
    out = b""
    try:
        deadline = time.monotonic() + 120
        while b"press Enter to stop everything" not in out:
            assert time.monotonic() < deadline and proc.poll() is None, out.decode()
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                out += os.read(proc.stdout.fileno(), 65536)  # type: ignore[union-attr]
        text = out.decode()
        url = re.search(r"dashboard: (http://127\.0\.0\.1:\d+/) .*until you press Enter",
                        text)
        assert url, text
        assert _answers(url.group(1))  # read after the demo's end: still up
        status = text[text.index("$ corralctl status"):]
        assert re.search(r"^balanced +true$", status, re.M), status  # one notion, true
        assert "criterion_met" not in status
        os.write(main, b"\n")
        assert proc.wait(30) == 0
        wait_until(lambda: not _answers(url.group(1)), what="the dashboard stopped")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(10)
        proc.stdout.close()  # type: ignore[union-attr]
        os.close(main)
