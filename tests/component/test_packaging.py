"""The installed package, used as a user uses it (processes: pip, the console scripts, a fresh
interpreter): only corral.* names are importable, every console script explains itself and
runs, the wheel holds the corral namespace only, and corralctl's start-up imports nothing of
the supervisor. (What can be read from the source alone is in tests/unit/test_packaging.py.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"common": "corral.common", "cli": "corral.cli", "client": "corral.client",
           "supervisor": "corral.supervisor", "worker": "corral.worker", "sim": "corral.sim",
           "dashboard": "corral.dashboard"}
SCRIPTS = ["corral-supervisor", "corral-worker", "corralctl", "corral-sim", "corral-dashboard"]


def test_only_corral_names_are_importable(tmp_path: Path) -> None:
    # From a directory that is not the checkout, so the source folders are not on sys.path.
    code = (
        "import importlib.util as u, corral.common, corral.supervisor, corral.worker, corral.sim\n"
        "bad = [n for n in ('supervisor', 'worker', 'common', 'sim') if u.find_spec(n)]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_scripts_explain_themselves(script: str) -> None:
    exe = Path(sys.executable).parent / script
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Usage:" in out.stdout


def test_wheel_installs_only_the_corral_namespace(tmp_path: Path) -> None:
    """`pip install .` (a real wheel, not the editable finder) holds only corral/…"""
    # Built from a copy, so setuptools' build/ and egg-info land in tmp, not in the checkout.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "out", "*.egg-info", "__pycache__", ".*_cache"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(src)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("corral-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"corral"}
    assert "corral/__init__.py" not in names  # a namespace package
    for name in FOLDERS.values():
        assert name.replace(".", "/") + "/__init__.py" in names
    # the dashboard's page ships in the package: no CDN, no build step
    for asset in ("index.html", "app.js", "views.js", "charts.js", "style.css"):
        assert f"corral/dashboard/static/{asset}" in names


def _imported_by_corralctl(names: list[str]) -> list[str]:
    code = ("import sys; import corral.client.ctl; "
            f"print([m for m in {names!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return eval(out.stdout)  # a list literal printed just above


def test_corralctl_imports_neither_the_supervisor_nor_the_router_nor_curve() -> None:
    heavy = ["corral.supervisor", "corral.client.router", "corral.common.placement",
             "corral.common.wire.routemap", "zmq.auth"]
    assert _imported_by_corralctl(heavy) == []


def test_the_installed_command_runs() -> None:
    exe = Path(sys.executable).parent / "corral-sim"
    out = subprocess.run(
        [str(exe), "subsetting", "--backends", "30", "--clients", "30", "--subset-size", "3",
         "-o", "json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["min"] == json.loads(out.stdout)["max"] == 3


def test_a_broken_install_of_the_dashboard_is_one_line() -> None:
    """Should aiohttp be missing all the same: one line naming it, not a traceback."""
    code = ("import sys; sys.modules['aiohttp'] = None\n"
            "from corral.dashboard.cli import main\n"
            "main(['--listen', '127.0.0.1:1'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "corral-dashboard: cannot start: the module 'aiohttp' is missing (aiohttp comes with "
        "corral: pip install --force-reinstall corral)"]
