"""scripts/bench ingest [-o json]: how many worker reports a running supervisor processes.

Sender processes emulate 10,000 workers (distinct worker ids, one DEALER per sender) and
report as fast as they can, first to a bare ROUTER + msgpack receive loop (the same Poller
and NOBLOCK drain, no decoding into messages, no state), then to a real `corral-supervisor`
with the same senders. It prints both rates and their ratio, and the supervisor's CPU share
while the 10,000 workers report once a second each.

Each sender pre-encodes one report per worker and patches only the seq bytes per send, so
the senders stay cheap enough to saturate the receiver on a 2-core machine.

With ``--dashboards N`` it also floods with N real `corral-dashboard` processes following the
supervisor, stopped (SIGSTOP) and running in turn, and measures the supervisor's CPU for the
dashboards' polling and listings directly (see _dashboards.py).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import multiprocessing as mp
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq
from _dashboards import Dashboards, listing_cpu, polling_cpu, report, summary
from chaostools.ports import free_port  # scripts/ is on the path (scripts/bench)

BIN = Path(sys.executable).parent
SEQ_BASE = 1 << 24  # seqs are always msgpack uint32, so they can be patched in place
SAMPLE_S = 0.5


def template(i: int, applied: tuple[int, int] = (0, 0),
             running: dict[str, int] | None = None) -> bytearray:
    from corral.common.wire import codec
    from corral.common.wire.protocol import Status

    st = Status(f"worker-{i:05d}", 1000 + i, SEQ_BASE + 0x5A5A5A, 1.0, 10, running or {},
                applied=applied)
    return bytearray(codec.encode(st))


def templates(first: int, count: int,
              applied: dict[int, tuple[int, int]]) -> tuple[list[bytearray], int]:
    """One encoded status per worker id, and the byte offset of its seq (seq comes before
    `applied` in the body, so the offset stays put when `applied` grows)."""
    out = [template(i, applied.get(i, (0, 0))) for i in range(first, first + count)]
    offset = bytes(out[0]).index(struct.pack(">BI", 0xCE, SEQ_BASE + 0x5A5A5A)) + 1
    return out, offset


def sent_at_offset(buf: bytearray) -> int:
    """Where a template's ``sent_at`` float is (it follows ``seq``, whose size is fixed)."""
    return bytes(buf).index(b"\xa7sent_at\xcb") + len(b"\xa7sent_at\xcb")


def sender(
    endpoint: str,
    index: int,
    first: int,
    count: int,
    mode: str,
    seconds: float,
    seq0: int,
    applied: dict[int, tuple[int, int]],
    result: Any,
) -> None:
    """mode flood: send as fast as possible for `seconds`; paced: each worker once a second."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.IDENTITY, f"sender-{index}".encode())
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDHWM, 10_000)
    s.connect(endpoint)
    from corral.common.wire import codec
    from corral.common.wire.protocol import Instructions
    from corral.worker.sets import SetApplier

    bufs, off = templates(first, count, applied)
    at = sent_at_offset(bufs[0])
    applied = dict(applied)
    # Each worker follows its sets as a worker does (the task list is empty: renewals only).
    sets = [SetApplier(1000 + i, applied.get(i, (0, 0))) for i in range(first, first + count)]
    pack_into, send, recv, decode = struct.pack_into, s.send, s.recv, codec.decode
    seq, sent, n = seq0, 0, len(bufs)
    time.sleep(0.3)  # let the connection come up
    start = time.monotonic()
    end = start + seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        if mode == "paced":
            # one round of every worker per second, spread evenly
            due = int((now - start) * n) - sent
            if due <= 0:
                time.sleep(0.002)
        else:
            due = 2000
        for _ in range(max(0, due)):
            buf = bufs[sent % n]
            pack_into(">I", buf, off, seq + sent // n)
            pack_into(">d", buf, at, now)  # a real send time: the supervisor's waits count on it
            send(buf)
            sent += 1
        try:  # apply what the supervisor sends, like a worker: report it as applied
            while True:
                msg = decode(recv(zmq.NOBLOCK))
                i = getattr(msg, "incarnation", 0) - 1000 - first
                if 0 <= i < n and isinstance(msg, Instructions) \
                        and sets[i].offer(msg).whole is not None:
                    applied[first + i] = sets[i].applied
                    bufs[i] = template(first + i, sets[i].applied, sets[i].tokens())
        except zmq.Again:
            pass
    result.put((index, sent, time.monotonic() - start, applied))
    s.close(0)
    ctx.term()


def run_senders(
    endpoint: str, workers: int, procs: int, mode: str, seconds: float, seq0: int
) -> int:
    """Run the senders; what each worker last applied carries over to the next run, as it
    would in a real worker (a fresh process would otherwise look like a lost instruction)."""
    q: Any = mp.get_context("spawn").Queue()
    per = workers // procs
    known = APPLIED.setdefault(endpoint, {})
    ps = [
        mp.get_context("spawn").Process(
            target=sender,
            args=(endpoint, k, k * per, per, mode, seconds, seq0,
                  {i: a for i, a in known.items() if k * per <= i < (k + 1) * per}, q),
        )
        for k in range(procs)
    ]
    for p in ps:
        p.start()
    total = 0
    for _ in ps:
        _, sent, _, applied = q.get(timeout=seconds + 60)
        total += sent
        known.update(applied)
    for p in ps:
        p.join(30)
    return total


APPLIED: dict[str, dict[int, tuple[int, int]]] = {}


def steady_rate(samples: list[tuple[float, int]]) -> float:
    """Median messages per second over the sampling intervals of the flood's middle: both
    receivers are measured the same way, ramp-up and ramp-down left out."""
    rates = [(c1 - c0) / (t1 - t0) for (t0, c0), (t1, c1) in itertools.pairwise(samples)
             if t1 > t0]
    busy = [r for r in rates if r > 0.2 * max(rates, default=0)]
    middle = busy[len(busy) // 4 : len(busy) - len(busy) // 4] or busy
    return statistics.median(middle) if middle else 0.0


def raw_receiver(endpoint: str, seconds: float, result: Any) -> None:
    """The baseline: Poller, drain with NOBLOCK, receive + msgpack.unpackb — receiving the
    same way the supervisor does (two recv calls and one RCVMORE check, plain int flags),
    so the ratio measures the supervisor's own work and nothing else."""
    ctx = zmq.Context()
    r = ctx.socket(zmq.ROUTER)
    r.setsockopt(zmq.LINGER, 0)
    r.bind(endpoint)
    poller = zmq.Poller()
    poller.register(r, zmq.POLLIN)
    count = 0
    samples: list[tuple[float, int]] = []
    unpackb, recv, more = msgpack.unpackb, r.recv, r.get
    noblock, rcvmore = int(zmq.NOBLOCK), int(zmq.RCVMORE)
    next_sample = time.monotonic()
    stop = time.monotonic() + seconds + 30
    while time.monotonic() < stop:
        if not poller.poll(500):
            if count:
                break
            continue
        for _ in range(5000):
            try:
                recv(noblock)
                payload = recv(noblock)
            except zmq.Again:
                break
            if more(rcvmore):
                continue
            unpackb(payload)
            count += 1
        now = time.monotonic()
        if now >= next_sample:
            samples.append((now, count))
            next_sample = now + SAMPLE_S
    result.put((count, samples))
    r.close(0)
    ctx.term()


def start_raw(seconds: float) -> tuple[str, Any, Any]:
    """A bare receiver process on a fresh port: (endpoint, process, its result queue)."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ctx = mp.get_context("spawn")
    q: Any = ctx.Queue()
    rp = ctx.Process(target=raw_receiver, args=(endpoint, seconds, q))
    rp.start()
    time.sleep(0.5)
    return endpoint, rp, q


def measure_raw(workers: int, procs: int, seconds: float) -> float:
    endpoint, rp, q = start_raw(seconds)
    sent = run_senders(endpoint, workers, procs, "flood", seconds, SEQ_BASE)
    count, samples = q.get(timeout=120)
    rp.join(30)
    print(f"  raw loop: received {count} of {sent}", file=sys.stderr)
    return steady_rate(samples)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ctl(control: str, verb: str) -> Any:
    from corral.client.control import request

    return request(control, verb, {}, timeout=10)


class SupervisorUnderTest:
    """A real corral-supervisor with `workers` emulated workers joined, ready for floods."""

    def __init__(self, workers: int, procs: int) -> None:
        self.workers, self.procs = workers, procs
        self.tmp = Path(tempfile.mkdtemp(prefix="corral-ingest-"))
        (self.tmp / "tasks.txt").write_text("")
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.control = f"tcp://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [str(BIN / "corral-supervisor"), "run", "--bind", self.endpoint,
             "--control", self.control, "--tasks", f"file:{self.tmp / 'tasks.txt'}",
             "--allow-empty", "--warmup", "0.5", "--state-file", str(self.tmp / "epoch"),
             "--lease", "10", "--log-level", "warning",
             "--fresh-ids", str(self.workers)],  # emulated workers share connections
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                ctl(self.control, "status")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        # Every worker joins first and applies the set its join got (a join is an assignment
        # event, not the steady state): paced rounds until each one has, bounded.
        self.seq = SEQ_BASE
        epoch = ctl(self.control, "status")["epoch"]
        for _ in range(20):
            run_senders(self.endpoint, workers, procs, "paced", 1.5, self.seq)
            self.seq += 1_000_000
            known = APPLIED.get(self.endpoint, {})
            if sum(a[0] == epoch for a in known.values()) == workers:
                break
        self.dashboards: Dashboards | None = None
        joined = ctl(self.control, "status")["workers_total"]
        print(f"  supervisor: {joined} workers joined", file=sys.stderr)

    def flood(self, seconds: float) -> float:
        self.seq += 10_000_000
        box: list[int] = []
        flood = threading.Thread(target=lambda: box.append(
            run_senders(self.endpoint, self.workers, self.procs, "flood", seconds, self.seq)))
        flood.start()
        samples: list[tuple[float, int]] = []
        while flood.is_alive():
            samples.append((time.monotonic(), ctl(self.control, "counters")["reports"]))
            time.sleep(SAMPLE_S)
        flood.join()
        c = ctl(self.control, "counters")
        print(f"  supervisor: processed {samples[-1][1] - samples[0][1]} of {box[0]} "
              f"({c['stale_reports']} stale, {c['resends']} resends)", file=sys.stderr)
        return steady_rate(samples)

    def cpu_share_at_1hz(self, seconds: float) -> float:
        """CPU seconds per second while every worker reports once a second."""
        self.seq += 10_000_000
        cpu0, w0 = cpu_seconds(self.proc.pid), time.monotonic()
        run_senders(self.endpoint, self.workers, self.procs, "paced", seconds, self.seq)
        return (cpu_seconds(self.proc.pid) - cpu0) / (time.monotonic() - w0)

    def start_dashboards(self, n: int) -> Dashboards:
        """N corral-dashboard processes following this supervisor, each listing the fleet.
        Listing 10,000 workers takes a while: the workers keep reporting meanwhile (paced,
        once a second each), so no lease lapses before the floods."""
        self.dashboards = Dashboards(self.control, n, free_port)
        self.seq += 10_000_000
        keep = threading.Thread(target=run_senders, args=(
            self.endpoint, self.workers, self.procs, "paced", 20.0, self.seq))
        keep.start()
        self.dashboards.wait_listed(self.workers)
        keep.join()
        print(f"  {n} dashboard(s) following the supervisor", file=sys.stderr)
        return self.dashboards

    def close(self) -> None:
        if self.dashboards is not None:
            self.dashboards.close()
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)


def raw_cpu_share_at_1hz(workers: int, procs: int, seconds: float) -> float:
    """The bare loop's own CPU share at the same paced load: the floor on this machine."""
    endpoint, rp, q = start_raw(seconds)
    cpu0, w0 = cpu_seconds(rp.pid), time.monotonic()
    run_senders(endpoint, workers, procs, "paced", seconds, SEQ_BASE)
    share = (cpu_seconds(rp.pid) - cpu0) / (time.monotonic() - w0)
    q.get(timeout=120)
    rp.join(30)
    return share


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ap.add_argument("--workers", type=int, default=10_000)
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each flood")
    ap.add_argument("--paced-seconds", type=float, default=10.0, help="length of the 1 Hz run")
    ap.add_argument("--repeat", type=int, default=3,
                    help="floods of each receiver, alternating; medians are reported")
    ap.add_argument("--dashboards", type=int, default=0, metavar="N",
                    help="then measure again with N corral-dashboard processes following the "
                    "supervisor (needs the dashboard extra)")
    args = ap.parse_args()
    if args.dashboards < 0:
        ap.error("--dashboards must be 0 or more")
    sut = SupervisorUnderTest(args.workers, args.senders)
    raws, sups, dsups = [], [], []  # the bare loop's floods; the supervisor's: without, with
    dash: dict[str, float] = {}
    try:
        dashboards = sut.start_dashboards(args.dashboards) if args.dashboards else None
        for i in range(args.repeat):
            raws.append(measure_raw(args.workers, args.senders, args.seconds))
            if dashboards is None:
                sups.append(sut.flood(args.seconds))
                continue
            # with and without in turn, the order swapped every round (drift cancels)
            for running in (True, False) if i % 2 else (False, True):
                dashboards.pause(not running)
                (dsups if running else sups).append(sut.flood(args.seconds))
        if dashboards is not None:
            dashboards.pause(False)
            dash["share"] = sut.cpu_share_at_1hz(args.paced_seconds)
            dashboards.pause(True)
        share = sut.cpu_share_at_1hz(args.paced_seconds)
        if dashboards is not None:
            cpu = functools.partial(cpu_seconds, sut.proc.pid)
            dash["listing"] = listing_cpu(sut.control, cpu)
            dash["polling"] = polling_cpu(sut.control, cpu)
    finally:
        sut.close()
    raw_share = raw_cpu_share_at_1hz(args.workers, args.senders, args.paced_seconds)
    raw, sup = statistics.median(raws), statistics.median(sups)
    result = {
        "supervisor_msgs_per_s": round(sup),
        "raw_msgs_per_s": round(raw),
        "ratio": round(sup / raw, 3),
        "cpu_share_10k_at_1hz": round(share, 4),
        "raw_cpu_share_10k_at_1hz": round(raw_share, 4),
        "runs": {"raw": [round(x) for x in raws], "supervisor": [round(x) for x in sups]},
        "workers": args.workers,
        "senders": args.senders,
    }
    if dash:
        result["dashboards"] = summary(args.dashboards, result["ratio"], raw, dsups,
                                       dash["share"], dash["listing"], dash["polling"])
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"{args.workers} emulated workers, {args.senders} sender processes")
    print(f"  bare ROUTER + msgpack loop : {result['raw_msgs_per_s']:>9,} reports/s")
    print(f"  corral-supervisor          : {result['supervisor_msgs_per_s']:>9,} reports/s")
    print(f"  ratio                      : {result['ratio']:.3f}  (target >= 0.65)")
    print(f"  CPU share at 10k x 1 Hz    : {result['cpu_share_10k_at_1hz']:.3f}  (target < 0.15)")
    print(f"  bare loop's CPU share there: {result['raw_cpu_share_10k_at_1hz']:.3f}  "
          "(this machine's floor)")
    print(f"  runs (reports/s): raw {result['runs']['raw']}, "
          f"supervisor {result['runs']['supervisor']}"
          + (" (dashboards stopped)" if dash else ""))
    if dash:
        report(result["dashboards"])


if __name__ == "__main__":
    main()
