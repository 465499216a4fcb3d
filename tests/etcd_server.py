"""A real etcd on loopback for the HA tests: a temporary data directory, free ports, stopped by
pid. Debian's etcd-server provides the binary (scripts/test installs it); a missing binary is a
failure, never a silent skip."""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

from .support import Proc, free_port, wait_until


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
        self.proc: Proc | None = None
        self.start()

    def start(self) -> None:
        proc = self.proc = Proc(self._args, self.log)

        def healthy() -> bool:
            assert proc.alive(), f"etcd exited: {proc.output()[-2000:]}"
            try:
                with urllib.request.urlopen(f"{self.client_url}/health", timeout=1) as r:
                    return b"true" in r.read()
            except OSError:
                return False

        wait_until(healthy, timeout=20, what="etcd healthy", interval=0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=10)
        self.proc = None
