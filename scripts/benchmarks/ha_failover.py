"""scripts/bench ha-failover [-o json]: a supervisor leader killed, a standby takes over.

Three supervisors elect a leader on a real etcd (started on loopback for the run); five workers
(log handler, journals) report to all three; 200 tasks. The leader is killed with SIGKILL.
Measured: seconds from the kill to the first instruction set the new leader sends (its
`messages_out` counter moving, polled every 20 ms), tasks moved and tasks restarted (from the
workers' journals: any start or stop after the kill), and lease lapses (workers logging that
they lost their lease). Target: failover_s <= TTL + one tick + 0.5 s, zeros elsewhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from _cluster import BIN, Cluster, fleet_parser, free_port, median_run, wait_until


class Etcd:
    """etcd on loopback with a temporary data dir, stopped by pid."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("etcd")
        if not binary:
            sys.exit("scripts/bench ha-failover: etcd is missing (apt-get install etcd-server)")
        port, peer = free_port(), free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.endpoint = f"etcd://127.0.0.1:{port}"
        self.log = open(workdir / "etcd.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [binary, "--data-dir", str(workdir / "etcd-data"), "--name", "bench",
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"bench=http://127.0.0.1:{peer}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(self._healthy, timeout=20)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                return b"true" in r.read()
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


def ctl(control: str, verb: str) -> Any:
    out = subprocess.run([str(BIN / "corralctl"), "--control", control, "--timeout", "1",
                          "-o", "json", verb], capture_output=True, text=True, timeout=30)
    return json.loads(out.stdout) if out.returncode == 0 else None


def one_run(tasks: int, workers: int, ttl: float, tick: float, lease: float) -> dict[str, Any]:
    c = Cluster([f"task-{i:03d}" for i in range(tasks)])
    etcd = Etcd(c.dir)
    sups: dict[str, tuple[str, str]] = {}  # name -> (endpoint, control)
    try:
        for i in range(3):
            name, endpoint, control = f"sup-{i}", f"tcp://127.0.0.1:{free_port()}", \
                f"tcp://127.0.0.1:{free_port()}"
            sups[name] = (endpoint, control)
            c._spawn(name, [str(BIN / "corral-supervisor"), "run", "--bind", endpoint,
                            "--control", control, "--tasks", f"file:{c.dir / 'tasks.txt'}",
                            "--ha", etcd.endpoint, "--ha-ttl", str(ttl), "--name", name,
                            "--tick", str(tick), "--lease", str(lease), "--warmup", "3",
                            "--expect-workers", str(workers), "--log-level", "warning",
                            "--state-file", str(c.dir / f"{name}.epoch")])
        c.endpoint = ",".join(e for e, _ in sups.values())
        names = [f"worker-{i}" for i in range(workers)]
        for name in names:
            c.start_worker(name, max_load=tasks, report_interval=1.0)
        wait_until(lambda: len(c.running(names)) == tasks, timeout=90)
        leader = wait_until(lambda: next((n for n, (_, ctrl) in sups.items()
                                          if (ctl(ctrl, "status") or {}).get("phase")
                                          == "running"), None), timeout=30)
        time.sleep(3.0)  # settled; the standbys have heard every worker
        before = c.running(names)
        standbys = {n: sups[n][1] for n in sups if n != leader}
        sent0 = {n: ctl(ctrl, "counters")["messages_out"] for n, ctrl in standbys.items()}
        killed = c.kill(leader)
        first: float | None = None
        deadline = killed + ttl + lease
        while first is None and time.monotonic() < deadline:
            for n, ctrl in standbys.items():
                counters = ctl(ctrl, "counters")
                if counters and counters["messages_out"] > sent0[n]:
                    first = time.monotonic()
                    break
            time.sleep(0.02)
        time.sleep(2.0)
        after = c.running(names)
        changed = c.starts_after(names, killed)
        lapses = sum((c.dir / f"{n}.log").read_text().count("lease lost") for n in names)
        return {"failover_s": (first - killed) if first else float("inf"),
                "tasks_moved": sum(1 for t in before if after.get(t) != before[t]),
                "tasks_restarted": len(changed), "lease_lapses": lapses}
    finally:
        c.close()
        etcd.stop()
        shutil.rmtree(c.dir, ignore_errors=True)


def main() -> None:
    ap = fleet_parser(__doc__)
    ap.add_argument("--ttl", type=float, default=3.0, help="--ha-ttl (the default)")
    ap.add_argument("--tick", type=float, default=0.5, help="--tick (the default)")
    ap.add_argument("--lease", type=float, default=10.0, help="--lease (the default)")
    args = ap.parse_args()
    runs = [one_run(args.tasks, args.workers, args.ttl, args.tick, args.lease)
            for _ in range(args.repeat)]
    r = median_run(runs, "failover_s")
    result = {"ttl_s": args.ttl, "failover_s": round(r["failover_s"], 3),
              "tasks_moved": max(x["tasks_moved"] for x in runs),
              "tasks_restarted": max(x["tasks_restarted"] for x in runs),
              "lease_lapses": max(x["lease_lapses"] for x in runs),
              "runs_s": [round(x["failover_s"], 3) for x in runs],
              "target_s": args.ttl + args.tick + 0.5}
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"3 supervisors (etcd, TTL {args.ttl:g} s), {args.workers} workers, {args.tasks} tasks")
    print(f"  leader kill -9 -> first instruction from the new leader: {result['failover_s']:.2f}"
          f" s (median of {args.repeat}: {result['runs_s']}; target <= {result['target_s']:g} s)")
    print(f"  tasks moved {result['tasks_moved']}, restarted {result['tasks_restarted']}, "
          f"lease lapses {result['lease_lapses']} (worst run)")


if __name__ == "__main__":
    main()
