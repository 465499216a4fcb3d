"""scripts/bench routing [-o json]: request routing through the client `Router`.

A real `corral-supervisor` and four `corral-worker --serve` processes on loopback, whose
handler sleeps for an artificial service time on requests that ask for work (2, 2.67, 3.33
and 4 ms: four speeds, the slowest half as fast as the fastest) and echoes the others at once.
One client, this process, with a Router, one request at a time.

1. Throughput: echo requests (no work) through the Router (``call_any``, wrr) against a bare
   DEALER -> ROUTER request loop in the same topology and with the same frames: four bare
   ROUTER processes that drain with NOBLOCK and echo, one DEALER each, taken in turn. Same
   run, alternating runs, medians reported. (Taking four processes in turn is itself slower
   than hitting one — each wakes up cold — so the loop against a single bare ROUTER is
   printed too, on stderr.)
2. Policies: work requests with round robin, then weighted round robin (after a warm-up past
   the weights' blackout). Per policy: the spread of the workers' utilization (max / min of
   what they report in their replies, averaged over the run) and the client's latency p50/p99.

Targets (issue 6): ratio >= 0.5; wrr's spread <= 1.2 where rr's is >= 1.6.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq
from chaostools.ports import free_port  # scripts/ is on the path (scripts/bench)

BIN = Path(sys.executable).parent
DELAYS_MS = (2.0, 2.667, 3.333, 4.0)
HANDLER = '''
import os, time

class Speed:
    def __init__(self):
        self.delay = float(os.environ["BENCH_DELAY_S"])

    def start(self, task):
        pass

    def stop(self, task):
        pass

    def serve(self, task, request):
        if request:  # a work request: the artificial service time
            time.sleep(self.delay)
        return request
'''


def echo_server(endpoint: str) -> None:
    """The bare loop: Poller, drain with NOBLOCK (two recv calls, one RCVMORE check), echo."""
    ctx = zmq.Context()
    r = ctx.socket(zmq.ROUTER)
    r.setsockopt(zmq.LINGER, 0)
    r.bind(endpoint)
    poller = zmq.Poller()
    poller.register(r, zmq.POLLIN)
    recv, send, more = r.recv, r.send, r.get
    noblock, sndmore, rcvmore = int(zmq.NOBLOCK), int(zmq.SNDMORE), int(zmq.RCVMORE)
    while True:
        poller.poll()
        while True:
            try:
                identity = recv(noblock)
                frame = recv(noblock)
            except zmq.Again:
                break
            if more(rcvmore):
                continue
            if frame == b"stop":
                r.close(0)
                ctx.term()
                return
            send(identity, noblock | sndmore)
            send(frame, noblock)


def raw_rps(endpoints: list[str], frame: bytes, seconds: float) -> float:
    """One request at a time, to each bare ROUTER in turn."""
    ctx = zmq.Context.instance()
    dealers = []
    for endpoint in endpoints:
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(endpoint)
        d.send(frame)
        d.recv()  # connected
        dealers.append((d.send, d.recv, d.poll))
    noblock = int(zmq.NOBLOCK)
    n, start = 0, time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for send, recv, poll in dealers * 12:
            send(frame)
            poll(5000)
            recv(noblock)
        n += 12 * len(dealers)
    return n / (time.perf_counter() - start)


def router_rps(router: Any, seconds: float) -> float:
    call = router.call_any
    n, start = 0, time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(50):
            call(None)
        n += 50
    return n / (time.perf_counter() - start)


class Fleet:
    """The supervisor and four serving workers, in a temporary directory."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="corral-routing-"))
        (self.tmp / "bench_handler.py").write_text(HANDLER)
        (self.tmp / "tasks.txt").write_text("".join(f"t{i}\n" for i in range(8)))
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.control = f"tcp://127.0.0.1:{free_port()}"
        self.procs = [self._start([
            "corral-supervisor", "run", "--bind", self.endpoint, "--control", self.control,
            "--tasks", f"file:{self.tmp / 'tasks.txt'}", "--warmup", "10", "--expect-workers",
            str(len(DELAYS_MS)), "--state-file", str(self.tmp / "epoch"),
            "--log-level", "warning"], {})]
        for i, delay in enumerate(DELAYS_MS):
            self.procs.append(self._start([
                "corral-worker", "run", "--supervisor", self.endpoint, "--id", f"w{i + 1}",
                "--handler", "python:bench_handler:Speed", "--serve",
                f"tcp://127.0.0.1:{free_port()}", "--log-level", "warning"],
                {"PYTHONPATH": str(self.tmp), "BENCH_DELAY_S": str(delay / 1000)}))

    def _start(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen([str(BIN / args[0]), *args[1:]], env={**os.environ, **env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self, timeout: float = 60.0) -> None:
        from corral.client.control import request

        deadline = time.monotonic() + timeout
        while True:
            try:
                m = request(self.control, "map", {}, timeout=2.0)
                if len(m["workers"]) == len(DELAYS_MS) and all(m["tasks"].values()):
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the fleet did not come up")
            time.sleep(0.2)

    def close(self) -> None:
        for p in reversed(self.procs):  # workers first: the first SIGTERM drains, a second
            p.terminate()              # stops them without waiting for a hand-off
        time.sleep(0.5)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)


def policy_run(fleet: Fleet, policy: str, warmup: float, seconds: float) -> dict[str, Any]:
    from corral.client import Router, RouterConfig

    with Router(RouterConfig(control=fleet.control, policy=policy, client=1)) as router:
        end = time.monotonic() + warmup
        while time.monotonic() < end:
            router.call_any(1)
        router.served_by.clear()
        latencies: list[float] = []
        samples: dict[str, list[float]] = {}
        start = time.monotonic()
        next_sample = start + 0.5
        while (now := time.monotonic()) < start + seconds:
            t0 = time.perf_counter()
            router.call_any(1)
            latencies.append(time.perf_counter() - t0)
            if now >= next_sample:  # what each worker reports: its last 2 s
                next_sample = now + 0.5
                for w, report in router.reports.items():
                    samples.setdefault(w, []).append(report.utilization)
        util = {w: statistics.fmean(v) for w, v in sorted(samples.items())}
        latencies.sort()
        return {
            "util_max_over_min": round(max(util.values()) / min(util.values()), 3),
            "p50_ms": round(1000 * latencies[len(latencies) // 2], 3),
            "p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 3),
            "_util": {w: round(u, 3) for w, u in util.items()},
            "_share": {w: router.served_by[w] for w in sorted(router.served_by)},
            "_requests": len(latencies),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each throughput run")
    ap.add_argument("--repeat", type=int, default=3,
                    help="throughput runs of each loop, alternating; medians are reported")
    ap.add_argument("--policy-seconds", type=float, default=8.0, help="length of each policy run")
    ap.add_argument("--warmup", type=float, default=8.0, help="wrr's warm-up before measuring")
    args = ap.parse_args()

    from corral.client import Router, RouterConfig
    from corral.common.wire import codec
    from corral.common.wire.protocol import Request

    raw_endpoints = [f"tcp://127.0.0.1:{free_port()}" for _ in DELAYS_MS]
    servers = [mp.get_context("spawn").Process(target=echo_server, args=(e,))
               for e in raw_endpoints]
    for server in servers:
        server.start()
    fleet = Fleet()
    frame = codec.encode(Request(123_456, None, None))  # what the Router sends for call_any
    try:
        fleet.wait_ready()
        raws, routers, singles = [], [], []
        with Router(RouterConfig(control=fleet.control, policy="wrr", client=1)) as router:
            router.call_any(None)
            for _ in range(args.repeat):
                raws.append(raw_rps(raw_endpoints, frame, args.seconds))
                routers.append(router_rps(router, args.seconds))
                singles.append(raw_rps(raw_endpoints[:1], frame, args.seconds))
        rr = policy_run(fleet, "rr", 1.0, args.policy_seconds)
        wrr = policy_run(fleet, "wrr", args.warmup, args.policy_seconds)
    finally:
        fleet.close()
        ctx = zmq.Context.instance()
        for endpoint, server in zip(raw_endpoints, servers, strict=True):
            stop = ctx.socket(zmq.DEALER)
            stop.setsockopt(zmq.LINGER, 1000)
            stop.connect(endpoint)
            stop.send(b"stop")
            server.join(10)
            stop.close()
    raw, routed = statistics.median(raws), statistics.median(routers)
    print(f"  runs (requests/s): raw over four {[round(x) for x in raws]}, "
          f"router {[round(x) for x in routers]}, raw to one {[round(x) for x in singles]} "
          f"(router / raw to one: {routed / statistics.median(singles):.3f})", file=sys.stderr)
    for name, r in (("rr", rr), ("wrr", wrr)):
        print(f"  {name}: utilization {r['_util']}, requests {r['_share']}", file=sys.stderr)
    result = {
        "router_rps": round(routed),
        "raw_rps": round(raw),
        "ratio": round(routed / raw, 3),
        "rr": {k: v for k, v in rr.items() if not k.startswith("_")},
        "wrr": {k: v for k, v in wrr.items() if not k.startswith("_")},
    }
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"one client, one request at a time; workers serving {DELAYS_MS} ms per work request")
    print(f"  bare DEALER -> ROUTER loop : {result['raw_rps']:>8,} requests/s (four, in turn)")
    print(f"  Router.call_any (wrr)      : {result['router_rps']:>8,} requests/s")
    print(f"  ratio                      : {result['ratio']:.3f}  (target >= 0.5)")
    for name in ("rr", "wrr"):
        r = result[name]
        print(f"  {name:<4} utilization max/min {r['util_max_over_min']:.3f}   "
              f"p50 {r['p50_ms']:.3f} ms   p99 {r['p99_ms']:.3f} ms")
    print("  (targets: wrr's spread <= 1.2 where rr's >= 1.6)")


if __name__ == "__main__":
    main()
