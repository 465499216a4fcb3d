"""HA on separate networks, for scripts/bench ha-partition: etcd, two supervisors and real
workers, each in network namespaces of their own (chaostools.netns), stopped by pid.

Two networks, as the issue measured them: etcd's (etcd members and the supervisors) and the
workers' (the supervisors and the workers); a third joins etcd members to each other, so a
minority of etcd can be cut from its peers while clients still reach it. A supervisor is on
etcd's network and on the workers': cutting one of its links is a one-sided partition.

What happened is read afterwards from what the processes wrote: the workers' journals (task
starts and stops, CLOCK_MONOTONIC, shared by every namespace) and the JSON logs (`leading`,
`lease lost`; their wall-clock timestamps are turned into monotonic time).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from _cluster import BIN, wait_until
from chaostools.netns import Nets, Node

PORT, CONTROL, ETCD_PORT, PEER_PORT = 7760, "tcp://127.0.0.1:7761", 2379, 2380
# Monotonic time = wall time - this (log lines carry wall time; journals monotonic time).
_WALL_MINUS_MONO = time.time() - time.monotonic()


def _mono(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - _WALL_MINUS_MONO


class HaNet:
    def __init__(self, tasks: int, *, lease: float, ttl: float, tick: float,
                 workers: int = 3, max_load: float = 10, etcd_members: int = 1,
                 etcd_args: tuple[str, ...] = (), sup_args: tuple[str, ...] = ()) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="corral-hanet-"))
        (self.dir / "tasks.txt").write_text("".join(f"task-{i:02d}\n" for i in range(tasks)))
        self.tasks, self.lease, self.ttl, self.tick = tasks, lease, ttl, tick
        self.max_load = max_load
        self.etcd_extra = list(etcd_args)  # more etcd flags (e.g. --pre-vote=true)
        self.sup_extra = list(sup_args)  # more supervisor flags (e.g. --settle 0)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._etcd_args: dict[str, list[str]] = {}
        self._files: list[Any] = []
        self.nets = Nets("hp", {"etcd": "10.29.1.0/24", "workers": "10.29.2.0/24",
                                "peers": "10.29.3.0/24"})
        try:
            self.etcd = [self.nets.node(f"etcd-{i}", ["etcd", "peers"])
                         for i in range(etcd_members)]
            self.sups = {n: self.nets.node(n, ["etcd", "workers"]) for n in ("sup-a", "sup-b")}
            self.wk = self.nets.node("workers", ["workers"])
        except Exception:
            self.nets.close()
            raise
        self.workers = [f"worker-{i}" for i in range(workers)]

    # -- processes -----------------------------------------------------------------------------

    def _spawn(self, name: str, node: Node, args: list[str]) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (closed in close())
        self._files.append(log)
        self.procs[name] = subprocess.Popen(
            self.nets.command(node, args), stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, "CORRAL_LOG_JSON": "1"})

    def start(self) -> None:
        """Everything up, every task running, both supervisors hearing every worker."""
        cluster = ",".join(f"e{i}=http://{n.addr['peers']}:{PEER_PORT}"
                           for i, n in enumerate(self.etcd))
        for i, node in enumerate(self.etcd):
            client = f"http://{node.addr['etcd']}:{ETCD_PORT}"
            peer = f"http://{node.addr['peers']}:{PEER_PORT}"
            self._etcd_args[f"etcd-{i}"] = [
                shutil.which("etcd") or "etcd", "--data-dir", str(self.dir / f"etcd-{i}"),
                "--name", f"e{i}",
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", cluster, *self.etcd_extra]
            self.start_etcd(i, wait=False)
        for i in range(len(self.etcd)):
            wait_until(lambda i=i: self.etcd_healthy(i), timeout=30)
        ha = "etcd://" + ",".join(f"{n.addr['etcd']}:{ETCD_PORT}" for n in self.etcd)
        extra = ["--insecure"] if _has_flag("corral-supervisor", "--insecure") else []
        for name, node in self.sups.items():
            self._spawn(name, node, [
                str(BIN / "corral-supervisor"), "run", "--bind",
                f"tcp://{node.addr['workers']}:{PORT}", "--control", CONTROL, "--tasks",
                f"file:{self.dir / 'tasks.txt'}", "--ha", ha, "--ha-ttl", str(self.ttl),
                "--name", name, "--lease", str(self.lease), "--tick", str(self.tick),
                "--warmup", "5", "--expect-workers", str(len(self.workers)),
                "--state-file", str(self.dir / f"{name}.epoch"), *extra, *self.sup_extra])
        endpoints = ",".join(f"tcp://{n.addr['workers']}:{PORT}" for n in self.sups.values())
        for w in self.workers:
            self._spawn(w, self.wk, [
                str(BIN / "corral-worker"), "run", "--supervisor", endpoints, "--id", w,
                "--max-load", str(self.max_load), "--handler", "log",
                "--journal", str(self.dir / f"{w}.journal")])
        wait_until(lambda: len(self.owners()) == self.tasks, timeout=90)
        wait_until(lambda: all((self.status(s) or {}).get("workers_active") == len(self.workers)
                               for s in self.sups), timeout=60)

    def start_etcd(self, i: int, wait: bool = True) -> None:
        name = f"etcd-{i}"
        self._spawn(name, self.etcd[i], self._etcd_args[name])
        if wait:
            wait_until(lambda: self.etcd_healthy(i), timeout=30)

    def stop(self, name: str) -> float:
        """SIGTERM a process and reap it; returns when it was signalled."""
        t = time.monotonic()
        p = self.procs.pop(name)
        p.terminate()
        p.wait(20)
        return t

    def etcd_healthy(self, i: int) -> bool:
        url = f"http://{self.etcd[i].addr['etcd']}:{ETCD_PORT}/health"

        def get() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    return b"true" in r.read()
            except OSError:
                return False

        return self.nets.call(self.etcd[i], get)

    def status(self, sup: str) -> dict[str, Any] | None:
        out = subprocess.run(self.nets.command(self.sups[sup], [
            str(BIN / "corralctl"), "--control", CONTROL, "--timeout", "2", "-o", "json",
            "status"]), capture_output=True, text=True, timeout=30)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def leader(self) -> str:
        """The supervisor that leads and runs (waits for one)."""
        def find() -> str | None:
            for s in self.sups:
                st = self.status(s) or {}
                if st.get("role") == "leader" and st.get("phase") == "running":
                    return s
            return None

        return wait_until(find, timeout=60)

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        for f in self._files:
            f.close()
        self.nets.close()

    # -- what happened -------------------------------------------------------------------------

    def journal(self) -> list[dict[str, Any]]:
        """Every start and stop line of every worker, in time order."""
        out = []
        for w in self.workers:
            path = self.dir / f"{w}.journal"
            if path.exists():
                out += [json.loads(line) for line in path.read_text().splitlines()]
        return sorted(out, key=lambda e: e["t"])

    def owners(self) -> dict[str, list[str]]:
        live: dict[str, list[str]] = {}
        for e in self.journal():
            ws = live.setdefault(e["task"], [])
            if e["event"] == "start":
                ws.append(e["worker"])
            elif e["worker"] in ws:
                ws.remove(e["worker"])
        return {t: ws for t, ws in live.items() if ws}

    def log_times(self, name: str, event: str, since: float) -> list[float]:
        """Monotonic times of ``name``'s log lines whose event is ``event``, from ``since``."""
        out = []
        for line in (self.dir / f"{name}.log").read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if rec.get("event", "").startswith(event) and "timestamp" in rec:
                t = _mono(rec["timestamp"])
                if t >= since:
                    out.append(t)
        return out

    def lapses(self, since: float) -> int:
        return sum(len(self.log_times(w, "lease lost", since)) for w in self.workers)


def _has_flag(program: str, flag: str) -> bool:
    out = subprocess.run([str(BIN / program), "run", "--help"], capture_output=True, text=True,
                         timeout=30)
    return flag in out.stdout


def coverage(journal: list[dict[str, Any]], t0: float, t1: float
             ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Per task, the seconds within [t0, t1] it ran on no worker (uncovered); on two workers
    under tokens of different epochs (two leaders' grants at once: double owners); and on two
    under one epoch's tokens (one leader's make-before-break move, planned), from the merged
    journals."""
    owners: dict[str, dict[str, int]] = {}  # task -> worker -> the epoch of its token
    since: dict[str, float] = {}
    bare: dict[str, float] = {}
    doubled: dict[str, float] = {}
    planned: dict[str, float] = {}

    def account(task: str, now: float) -> None:
        start, end = max(since.get(task, t0), t0), min(now, t1)
        held = owners.get(task, {})
        if end > start:
            into = bare if not held else None
            if len(held) > 1:
                into = doubled if len(set(held.values())) > 1 else planned
            if into is not None:
                into[task] = into.get(task, 0.0) + end - start
        since[task] = now

    for e in journal:
        task = e["task"]
        account(task, e["t"])
        held = owners.setdefault(task, {})
        if e["event"] == "start":
            held[e["worker"]] = int(e.get("token", 0)) >> 22
        else:
            held.pop(e["worker"], None)
    for task in list(owners):
        account(task, t1)
    return bare, doubled, planned


def changes(journal: list[dict[str, Any]], t0: float, t1: float) -> int:
    """Task starts and stops within [t0, t1]."""
    return sum(1 for e in journal if t0 <= e["t"] <= t1)


def settle(pred: Callable[[], Any], timeout: float) -> Any:
    return wait_until(pred, timeout=timeout, interval=0.2)
