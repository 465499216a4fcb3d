"""Static checks as tests, so CI enforces them: ruff everywhere, mypy (strict on common/ and
sim/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_ruff() -> None:
    out = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy(tmp_path: Path) -> None:
    # mypy cannot see through setuptools' editable-install finder, so give it the installed
    # layout as a tree of links: corral/common -> common/, and so on.
    (tmp_path / "corral").mkdir()
    for folder in ("common", "cli", "client", "supervisor", "worker", "sim", "dashboard"):
        (tmp_path / "corral" / folder).symlink_to(ROOT / folder)
    out = subprocess.run(
        [str(BIN / "mypy"), "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
         str(ROOT / ".mypy_cache"), "-p", "corral.common", "-p", "corral.cli",
         "-p", "corral.client", "-p", "corral.supervisor", "-p", "corral.worker",
         "-p", "corral.sim", "-p", "corral.dashboard"],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(tmp_path)},
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
