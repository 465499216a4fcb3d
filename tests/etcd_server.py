"""A real etcd on loopback for the HA tests: a temporary data directory, free ports, stopped by
pid. Debian's etcd-server provides the binary (scripts/test installs it); a missing binary is a
failure, never a silent skip."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from .e2e.procs import free_port


class Etcd:
    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("etcd")
        assert binary, "etcd is not installed: run scripts/test (it installs etcd-server)"
        self.port = free_port()
        peer = free_port()
        self.client_url = f"http://127.0.0.1:{self.port}"
        self.endpoint = f"etcd://127.0.0.1:{self.port}"
        self.log = workdir / "etcd.log"
        self._args = [binary, "--data-dir", str(workdir / "etcd-data"), "--name", "test",
                      "--listen-client-urls", self.client_url,
                      "--advertise-client-urls", self.client_url,
                      "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                      "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                      "--initial-cluster", f"test=http://127.0.0.1:{peer}"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self._args, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{self.client_url}/health", timeout=1) as r:
                    if b"true" in r.read():
                        return
            except OSError:
                pass
            assert self.proc.poll() is None, f"etcd exited: {self.log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "etcd did not become healthy in 20 s"
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
