"""What the dashboard's end-to-end tests share (no tests here): a `corral-dashboard` process on
a free loopback port, a headless system Chromium driven by selenium, screenshots as artifacts.

Chromium and chromedriver are Debian's (`scripts/test` installs them); nothing is downloaded
at run time (selenium's own driver manager is never asked: the driver's path is given).
Screenshots go to ``$CORRAL_SCREENSHOTS`` (default ``out/screenshots`` in the checkout, which
git ignores).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ..support import Proc, free_port, wait_until
from .procs import BIN, Procs

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("CORRAL_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("CORRAL_CHROMEDRIVER", "/usr/bin/chromedriver"))
SHOTS = Path(os.environ.get("CORRAL_SCREENSHOTS", ROOT / "out" / "screenshots"))
CHROME_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,800"]
TOKEN = "test-token-0123456789"


class Dashboard:
    """A `corral-dashboard` following ``control``, on a free port; stopped with the Procs."""

    def __init__(self, procs: Procs, control: str, token: bool = True, name: str = "dashboard",
                 *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [str(BIN / "corral-dashboard"), "--control", control,
                "--listen", f"127.0.0.1:{self.port}", "--timeout", "1", *extra]
        if token:
            path = procs.tmp / f"{name}.token"
            path.write_text(TOKEN + "\n")
            args += ["--token-file", str(path)]
        self.proc: Proc = procs.start(name, args, env={"CORRAL_LOG_JSON": "1"})
        wait_until(self._up, timeout=20, what="the dashboard answers")

    def _up(self) -> bool:
        assert self.proc.alive(), self.proc.output()
        try:
            self.get("/api/state")
            return True
        except (OSError, urllib.error.URLError):
            return False

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as r:
            return json.load(r)

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None
             ) -> tuple[int, Any]:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json",
                                                             **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


def chromium_or_skip() -> None:
    """Skip only when the browser is missing and cannot be installed here (scripts/test
    installs it wherever it runs as root with apt-get, as CI does)."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    can_install = os.geteuid() == 0 and shutil.which("apt-get") is not None
    if can_install:
        pytest.fail(f"{CHROMIUM} or {CHROMEDRIVER} is missing: run scripts/test, which "
                    "installs Debian's chromium and chromium-driver")
    pytest.skip(f"{CHROMIUM} or {CHROMEDRIVER} is missing and cannot be installed here "
                "(needs root and apt-get)")


@contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium at 1280×800 with a fresh profile; quit (by its driver) afterwards."""
    chromium_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="corral-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in [*CHROME_FLAGS, f"--user-data-dir={profile}"]:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def text_of(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return "\n".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, css))


def worker_states(driver: Any) -> dict[str, str]:
    """Worker id -> the state its row shows, for the rows on the page."""
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#fleet tbody tr')]"
        ".map(r => [r.dataset.worker, r.dataset.state, r.querySelector('.util').innerText])")
    return {w: s for w, s, _ in rows}


def utilizations(driver: Any) -> dict[str, str]:
    rows = driver.execute_script(
        "return [...document.querySelectorAll('#fleet tbody tr')]"
        ".map(r => [r.dataset.worker, r.querySelector('.util').innerText])")
    return dict(rows)


def event_kinds(driver: Any, css: str = "#latest li") -> list[tuple[str, str]]:
    """(kind, sentence) of the events listed, newest first."""
    return [tuple(x) for x in driver.execute_script(
        f"return [...document.querySelectorAll('{css}')]"
        ".map(li => [li.dataset.kind, li.querySelector('.what').innerText])")]
