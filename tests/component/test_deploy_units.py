"""The systemd units docs/deploy.md tells operators to install are well-formed: each passes
`systemd-analyze verify` — no warning either — with its ``ExecStart`` pointed at this test's
own install of corral (scripts/test installs Debian's systemd, which provides the tool)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
UNIT = re.compile(r"^`/etc/systemd/system/([\w@.-]+\.service)`:\n\n```ini\n(.*?)```", re.M | re.S)


def units() -> dict[str, str]:
    """Unit name -> its text, for every unit file docs/deploy.md shows in full."""
    return {m[1]: m[2] for m in UNIT.finditer((ROOT / "docs" / "deploy.md").read_text())}


def test_deploy_md_shows_the_worker_unit_with_its_upgrade_path() -> None:
    found = units()
    assert set(found) >= {"corral-worker.service", "corral-supervisor.service"}
    worker = found["corral-worker.service"]
    for line in ("KillMode=process", "ExecReload=/bin/kill -USR2 $MAINPID", "Restart=always",
                 "RuntimeDirectory=corral", "RuntimeDirectoryPreserve=yes"):
        assert line in worker.splitlines(), line


@pytest.mark.parametrize("name", sorted(units()))
def test_each_unit_passes_systemd_analyze_verify(name: str, tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    assert tool, "systemd-analyze is missing: scripts/test installs Debian's systemd"
    text = units()[name]
    assert "/opt/corral/bin/" in text
    unit = tmp_path / name
    unit.write_text(text.replace("/opt/corral/bin/", f"{BIN}/"))
    out = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True,
                         timeout=60)
    # verify exits 0 on an unknown key or a value it cannot parse: its warnings count too.
    problems = [line for line in out.stderr.splitlines() if str(unit) in line or name in line]
    assert out.returncode == 0 and problems == [], out.stderr
