"""Supervisor HA on two networks for the partition tests: etcd's and the workers', each node in
a network namespace of its own (chaostools.netns; needs root). A supervisor is on both, so
cutting one of its links is a one-sided partition; the fake workers (dealers.Fleet) report
from a namespace on the workers' network. Every process is started through `Procs` and stopped
by pid; `close` then removes the namespaces."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from chaostools.netns import Nets, Node

from ..etcd_server import Etcd
from .dealers import FakeWorker, Fleet
from .procs import BIN, Procs

PORT, CONTROL = 7760, "tcp://127.0.0.1:7761"  # each supervisor has a namespace of its own


class NetCluster:
    def __init__(self, procs: Procs, tasks: Path, **opts: Any) -> None:
        self.procs = procs
        self.tasks = tasks
        self.opts = opts
        self.nets = Nets("t", {"etcd": "10.29.1.0/24", "workers": "10.29.2.0/24"})
        self.fleet: Fleet | None = None
        self.etcd: Etcd | None = None
        try:
            self.etcd_node = self.nets.node("etcd", ["etcd"])
            self.sups = {n: self.nets.node(n, ["etcd", "workers"]) for n in ("sup-a", "sup-b")}
            self.workers_node = self.nets.node("workers", ["workers"])
            self.etcd = Etcd(procs.tmp, self.nets, self.etcd_node)
            for name, node in self.sups.items():
                self._start_supervisor(name, node)
        except Exception:
            self.close()
            raise

    def _start_supervisor(self, name: str, node: Node) -> None:
        args = [str(BIN / "corral-supervisor"), "run", "--bind", self.endpoint(name),
                "--control", CONTROL, "--tasks", f"file:{self.tasks}", "--ha",
                self.etcd_endpoint, "--name", name,
                "--state-file", str(self.procs.tmp / f"{name}.epoch"),
                # Its worker endpoint is on a private network of namespaces this test made
                # (not loopback): without Curve keys that needs saying so.
                "--insecure"]
        for k, v in self.opts.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        self.procs.start(name, self.nets.command(node, args), env={"CORRAL_LOG_JSON": "1"})

    @property
    def etcd_endpoint(self) -> str:
        return f"etcd://{self.etcd_node.addr['etcd']}:2379"

    def endpoint(self, name: str) -> str:
        return f"tcp://{self.sups[name].addr['workers']}:{PORT}"

    def add_fleet(self, names: list[str], interval: float) -> Fleet:
        self.fleet = Fleet([self.endpoint(n) for n in self.sups], interval=interval,
                           netns=self.workers_node.namespace)
        for n in names:
            self.fleet.add(FakeWorker(n))
        return self.fleet

    def status(self, name: str) -> dict[str, Any]:
        """``corralctl status`` of supervisor ``name`` ({} when it does not answer)."""
        out = subprocess.run(self.nets.command(self.sups[name], [
            str(BIN / "corralctl"), "--control", CONTROL, "--timeout", "2", "-o", "json",
            "status"]), capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout) if out.returncode == 0 else {}

    def leader(self) -> str | None:
        for name in self.sups:
            st = self.status(name)
            if st.get("role") == "leader" and st.get("phase") == "running":
                return name
        return None

    def output(self, name: str) -> str:
        return (self.procs.tmp / f"{name}.log").read_text(errors="replace")

    def close(self) -> None:
        """Workers, supervisors and etcd stopped (by pid), then the namespaces removed."""
        if self.fleet is not None:
            self.fleet.close()
        self.procs.stop_all()
        if self.etcd is not None:
            self.etcd.stop()
        self.nets.close()
