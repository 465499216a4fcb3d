"""CurveZMQ on the worker channel: unauthorised keys never get in; an authorised worker may
report only under the id its key file names."""

from __future__ import annotations

import contextlib
import json
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.auth

from corral.common.wire import codec
from corral.common.wire.protocol import Refusal, Status

from ..support import wait_until
from .procs import BIN, Procs, Supervisor

pytestmark = pytest.mark.e2e


def keygen(directory: Path, name: str) -> None:
    out = subprocess.run([str(BIN / "corral-supervisor"), "keygen", str(directory), "--name",
                          name], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def curve_supervisor(procs: Procs, tasks: str, workers: tuple[str, ...],
                     admins: tuple[str, ...] = (), strangers: tuple[str, ...] = ()
                     ) -> tuple[Supervisor, Path]:
    """A supervisor with Curve on: keys for itself, ``workers`` (authorised on the worker
    channel), ``admins`` (on the control endpoint, if any) and ``strangers`` (keys nobody
    authorised); ``tasks`` one id per line. Returns it and the keys' folder."""
    keys, authorized, control = procs.tmp / "keys", procs.tmp / "authorized", procs.tmp / "admins"
    for name in ("supervisor", *workers, *admins, *strangers):
        keygen(keys, name)
    for folder, names in ((authorized, workers), (control, admins)):
        folder.mkdir()
        for name in names:
            (folder / f"{name}.key").write_bytes((keys / f"{name}.key").read_bytes())
    (procs.tmp / "tasks.txt").write_text(tasks)
    extra = {"control_keys": str(control)} if admins else {}
    if workers:  # none: the worker endpoint stays plain, only the control endpoint is Curve
        extra["authorized_keys"] = str(authorized)
    sup = Supervisor(procs, f"file:{procs.tmp / 'tasks.txt'}", warmup=0.5,
                     curve_secret_key=str(keys / "supervisor.key_secret"), **extra)
    return sup, keys


def dealer(ctx: zmq.Context[Any], sup: Supervisor, keys: Path, name: str) -> Any:
    server_public, _ = zmq.auth.load_certificate(str(keys / "supervisor.key"))
    public, secret = zmq.auth.load_certificate(str(keys / f"{name}.key_secret"))
    s = ctx.socket(zmq.DEALER)
    s.curve_serverkey, s.curve_publickey, s.curve_secretkey = server_public, public, secret
    s.linger = 0
    # A refused handshake leaves a DEALER with no peer, and a send to no peer blocks for
    # ever: bound every send so the refused key cannot hang the test.
    s.sndtimeo = 1000
    s.connect(sup.endpoint)
    return s


def test_curve_admits_only_authorised_keys_under_their_own_names(procs: Procs) -> None:
    sup, keys = curve_supervisor(procs, "t1\nt2\n", ("alice", "bob"), strangers=("mallory",))
    ctx = zmq.Context()
    socks = {n: dealer(ctx, sup, keys, n) for n in ("alice", "mallory")}
    try:
        deadline = time.monotonic() + 15
        seq = 0
        while time.monotonic() < deadline:
            seq += 1
            for name, s in socks.items():
                # no peer (yet, or ever) raises Again: the checks below judge
                with contextlib.suppress(zmq.Again):
                    s.send(codec.encode(Status(name, 7, seq, time.monotonic(), 10, {})))
            if {w["id"] for w in sup.ctl("workers")["workers"]} >= {"alice"}:
                break
            time.sleep(0.2)
        ids = {w["id"] for w in sup.ctl("workers")["workers"]}
        assert "alice" in ids and "mallory" not in ids  # mallory's messages never arrived
        # alice, authorised, reporting as bob: refused and counted
        socks["alice"].send(codec.encode(Status("bob", 8, 1, time.monotonic(), 10, {})))
        refusal = None
        while refusal is None and socks["alice"].poll(5000):
            msg = codec.decode(socks["alice"].recv())
            if isinstance(msg, Refusal):
                refusal = msg
        assert refusal is not None and refusal.code == "unauthorized"
        assert "authorised as 'alice', not as 'bob'" in refusal.reason
        wait_until(lambda: sup.ctl("counters")["unauthorized_reports"] >= 1, what="counted")
        assert "bob" not in {w["id"] for w in sup.ctl("workers")["workers"]}
    finally:
        for s in socks.values():
            s.close(0)
        ctx.term()


def test_keygen_refuses_to_overwrite_and_config_needs_both_halves(tmp_path: Path) -> None:
    keygen(tmp_path, "x")
    out = subprocess.run([str(BIN / "corral-supervisor"), "keygen", str(tmp_path), "--name",
                          "x"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "not overwriting" in out.stderr
    out = subprocess.run([str(BIN / "corral-supervisor"), "run", "--tasks", "file:x",
                          "--curve-secret-key", str(tmp_path / "x.key_secret")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "protects nothing alone" in out.stderr


def test_keygen_writes_the_secret_key_0600_in_a_0700_directory(tmp_path: Path) -> None:
    """A secret key readable by every user of the host is no secret (issue 28)."""
    keys = tmp_path / "new" / "keys"
    keygen(keys, "w1")
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert stat.S_IMODE((keys / "w1.key_secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((keys / "w1.key").stat().st_mode) == 0o644
    tmp_path.chmod(0o755)  # an existing folder open to others: kept, and the user is told
    out = subprocess.run([str(BIN / "corral-supervisor"), "keygen", str(tmp_path), "--name",
                          "w2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "chmod 700" in out.stderr
    assert stat.S_IMODE((tmp_path / "w2.key_secret").stat().st_mode) == 0o600


def test_real_workers_with_keys(procs: Procs) -> None:
    sup, keys = curve_supervisor(procs, "t1\nt2\n", ("alice",))
    curve = ["--curve-server-key", str(keys / "supervisor.key"),
             "--curve-secret-key", str(keys / "alice.key_secret")]
    args = [str(BIN / "corral-worker"), "run", "--supervisor", sup.endpoint, "--handler", "log",
            "--report-interval", "0.3", *curve]
    procs.start("alice", [*args, "--id", "alice"])
    wait_until(lambda: sup.ctl("status")["tasks_assigned"] == 2
               and any(w["id"] == "alice" and w["running"] == 2
                       for w in sup.ctl("workers")["workers"]), what="alice runs both tasks")
    impostor = procs.start("impostor", [*args, "--id", "bob"])  # alice's key, bob's id
    assert impostor.wait(20) == 3
    assert "authorised as 'alice', not as 'bob'" in impostor.output()
    assert "bob" not in {w["id"] for w in sup.ctl("workers")["workers"]}


def test_control_endpoint_with_curve(procs: Procs) -> None:
    sup, keys = curve_supervisor(procs, "t1\n", ("alice",), admins=("ops",))

    def ctl(*key: str) -> subprocess.CompletedProcess[str]:
        args = [str(BIN / "corralctl"), "--control", sup.control, "--timeout", "1", "-o", "json"]
        if key:
            args += ["--curve-server-key", str(keys / "supervisor.key"),
                     "--curve-secret-key", str(keys / f"{key[0]}.key_secret")]
        return subprocess.run([*args, "status"], capture_output=True, text=True, timeout=60)

    ok = wait_until(lambda: (r := ctl("ops")).returncode == 0 and r, what="ops gets in")
    assert '"phase"' in ok.stdout
    for denied in (ctl(), ctl("alice")):  # no key; a worker's key is not a control key
        assert denied.returncode == 1 and "no answer from the supervisor" in denied.stderr


def test_control_endpoint_alone_with_curve(procs: Procs) -> None:
    """--control-keys without --authorized-keys: the control endpoint is protected, the
    worker endpoint stays plain (issue 32: it used to need --authorized-keys too)."""
    sup, keys = curve_supervisor(procs, "t1\n", (), admins=("ops",))
    procs.start("w", [str(BIN / "corral-worker"), "run", "--supervisor", sup.endpoint,
                      "--handler", "log", "--id", "w", "--report-interval", "0.3"])
    args = [str(BIN / "corralctl"), "--control", sup.control, "--timeout", "1", "-o", "json",
            "--curve-server-key", str(keys / "supervisor.key"),
            "--curve-secret-key", str(keys / "ops.key_secret"), "status"]
    wait_until(lambda: json.loads(subprocess.run(args, capture_output=True, text=True,
                                                 timeout=60).stdout or "{}"
                                  ).get("tasks_assigned") == 1, what="w runs t1, ops sees it")
    plain = subprocess.run([*args[:7], "status"], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 1 and "no answer from the supervisor" in plain.stderr
