"""A real etcd on loopback for the HA tests: a temporary data directory, free ports, stopped by
pid. Debian's etcd-server provides the binary (scripts/test installs it); a missing binary is a
failure, never a silent skip. Or, given a node of a `chaostools.netns.Nets`, inside that
node's namespace on its address on the ``etcd`` network (the partition tests)."""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path
from typing import Any

from .support import Proc, free_port, wait_until


class Etcd:
    def __init__(self, workdir: Path, nets: Any = None, node: Any = None) -> None:
        binary = shutil.which("etcd")
        assert binary, "etcd is not installed: run scripts/test (it installs etcd-server)"
        self.nets, self.node = nets, node
        host = "127.0.0.1" if node is None else node.addr["etcd"]
        self.port = free_port() if node is None else 2379
        peer = free_port() if node is None else 2380
        self.client_url = f"http://{host}:{self.port}"
        self.endpoint = f"etcd://{host}:{self.port}"
        self.log = workdir / "etcd.log"
        self._args = [binary, "--data-dir", str(workdir / "etcd-data"), "--name", "test",
                      "--listen-client-urls", self.client_url,
                      "--advertise-client-urls", self.client_url,
                      "--listen-peer-urls", f"http://{host}:{peer}",
                      "--initial-advertise-peer-urls", f"http://{host}:{peer}",
                      "--initial-cluster", f"test=http://{host}:{peer}"]
        if node is not None:
            self._args = nets.command(node, self._args)
        self.proc: Proc | None = None
        self.start()

    def start(self) -> None:
        proc = self.proc = Proc(self._args, self.log)

        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"{self.client_url}/health", timeout=1) as r:
                    return b"true" in r.read()
            except OSError:
                return False

        def healthy() -> bool:
            assert proc.alive(), f"etcd exited: {proc.output()[-2000:]}"
            return answers() if self.node is None else self.nets.call(self.node, answers)

        wait_until(healthy, timeout=20, what="etcd healthy", interval=0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=10)
        self.proc = None
