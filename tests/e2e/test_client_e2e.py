"""The client library end to end (`corral.client`): a Router and corralctl through a control
endpoint protected with CurveZMQ, and both following the leader across an HA failover."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from corral.client import ControlClient, CurveKeys, Router, RouterConfig
from corral.client.errors import ControlFailed, MapUnavailable, Unreachable

from ..etcd_server import Etcd
from ..support import free_port, wait_until
from .procs import BIN, Procs, Supervisor
from .test_curve_e2e import curve_supervisor
from .test_routing import HANDLER

pytestmark = pytest.mark.e2e


def serving_worker(procs: Procs, name: str, supervisors: str, *extra: str) -> None:
    (procs.tmp / "routing_handler.py").write_text(HANDLER)
    procs.start(name, [str(BIN / "corral-worker"), "run", "--supervisor", supervisors,
                       "--id", name, "--handler", "python:routing_handler:Echo",
                       "--serve", f"tcp://127.0.0.1:{free_port()}",
                       "--report-interval", "0.25", *extra],
                env={"PYTHONPATH": str(procs.tmp), "WORKER_NAME": name})


def test_a_router_with_curve_keys_calls_through_a_protected_control_endpoint(
        procs: Procs) -> None:
    sup, keys = curve_supervisor(procs, "t1\nt2\n", ("w1",), admins=("client",))
    serving_worker(procs, "w1", sup.endpoint,
                   "--curve-server-key", str(keys / "supervisor.key"),
                   "--curve-secret-key", str(keys / "w1.key_secret"))
    server_key, client_key = str(keys / "supervisor.key"), str(keys / "client.key_secret")
    ctl = ControlClient(sup.control, curve=CurveKeys.load(server_key, client_key), timeout=2)
    try:
        wait_until(lambda: all(ctl.call("map")["tasks"].get(t) for t in ("t1", "t2")),
                   timeout=30, what="both tasks served")
    finally:
        ctl.close()
    with Router(RouterConfig(control=sup.control, curve_server_key=server_key,
                             curve_secret_key=client_key, client=1)) as router:
        assert router.call("t1", "hi")["worker"] == "w1"
        assert router.call_any("hi")["worker"] == "w1"
    # Without keys the control endpoint stays shut: the router has no map to route by.
    with Router(RouterConfig(control=sup.control, control_timeout=0.5, client=2)) as router, \
            pytest.raises(MapUnavailable, match="no map from the supervisor"):
        router.call("t1", "hi")


@pytest.mark.timeout(120)
def test_a_router_and_corralctl_follow_the_leader_across_a_failover(
        procs: Procs, etcd: Etcd) -> None:
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"t{i}\n" for i in range(6)))
    sups = []
    for name in ("sup-a", "sup-b"):
        # A worker's lease must outlast the election plus the new leader's first sets (its
        # renewals). At lease 6 (a report every 3 s) a lease renewed up to 3 s before the
        # kill ends 3-6 s after it, and the survivor (ha_ttl 2) sends its sets ~2.5 s after
        # it: half a second of margin, lost once on a loaded CI machine (a worker without a
        # lease answers not_owner). Lease 10 leaves 2.5 s or more.
        s = Supervisor(procs, f"file:{tasks}", name=name, ha=etcd.endpoint, ha_ttl=2.0,
                       warmup=1, lease=10.0, tick=0.25, expect_workers=2)
        sups.append(s)
    endpoints = ",".join(s.endpoint for s in sups)
    controls = [s.control for s in sups]
    for name in ("w1", "w2"):
        serving_worker(procs, name, endpoints)
    ctl = ControlClient(controls, timeout=2)
    router = Router(RouterConfig(control=controls, control_timeout=1.0,
                                 refresh_interval=0.5, client=1, timeout=3.0))
    try:
        def served() -> bool:
            try:
                m = ctl.call("map")
            except (Unreachable, ControlFailed):  # starting up, or no leader elected yet
                return False
            return len(m["tasks"]) == 6 and all(m["tasks"].values())
        wait_until(served, timeout=40, what="every task served")
        first = ctl.call("status")
        assert first["role"] == "leader"
        leader = next(s for s in sups if s.opts["name"] == first["leader"])
        survivor = next(s for s in sups if s is not leader)
        assert router.call("t0", 1)["task"] == "t0"
        leader.proc.signal(signal.SIGKILL)
        leader.proc.wait(5)
        killed = time.monotonic()
        # Calls keep succeeding from the last map while the router looks for the new leader.
        calls = 0
        while time.monotonic() < killed + 8.0:
            assert router.call(f"t{calls % 6}", calls)["task"] == f"t{calls % 6}"
            calls += 1
        status = wait_until(lambda: (st := ctl.call("status"))["role"] == "leader" and st,
                            timeout=15, what="the new leader answers")
        assert status["leader"] == survivor.opts["name"]
        out = subprocess.run([str(BIN / "corralctl"), "--control", ",".join(controls),
                              "--timeout", "1", "-o", "json", "status"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert '"role": "leader"' in out.stdout and survivor.opts["name"] in out.stdout
        wait_until(lambda: router.refresh() or router.map.epoch == status["epoch"],
                   timeout=10, what="the router's map from the new leader")
        assert router.call("t1", "after")["task"] == "t1"
        assert calls > 10
    finally:
        router.close()
        ctl.close()


def test_a_control_client_refuses_a_list_without_endpoints(tmp_path: Path) -> None:
    from corral.common.errors import ConfigError

    with pytest.raises(ConfigError, match="no control endpoint"):
        ControlClient(" , ")
    with pytest.raises(ConfigError, match="not a ZeroMQ endpoint"):
        ControlClient("localhost:7761")
    with pytest.raises(ConfigError, match="cannot load"):
        CurveKeys.load(str(tmp_path / "missing.key"), str(tmp_path / "missing.key_secret"))
