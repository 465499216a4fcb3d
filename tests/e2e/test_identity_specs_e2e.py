"""Two promises end to end, with real processes: an id in use is never given to a second
process (an impostor started with a live worker's id runs nothing, and the live one stops
nothing), and a task's spec reaches it — a changed spec restarts it with the new one, for
`exec` (``CORRAL_TASK_SPEC``) and for `python:` handlers (``start(task, spec)``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..support import wait_until
from .fleetprocs import journal, running_now, start_worker
from .procs import Procs, Supervisor, write_json

pytestmark = pytest.mark.e2e

LEASE, MARGIN, TICK = 3.0, 1.0, 0.25


def test_an_impostor_with_a_live_worker_s_id_runs_nothing(procs: Procs) -> None:
    tasks = procs.tmp / "tasks.txt"
    tasks.write_text("".join(f"room-{i}\n" for i in range(6)))
    sup = Supervisor(procs, f"file:{tasks}", lease=LEASE, lease_margin=MARGIN, tick=TICK,
                     expect_workers=2, warmup=10)
    start_worker(procs, sup, "a", 10)
    start_worker(procs, sup, "b", 10)
    wait_until(lambda: len(running_now(procs, ["a", "b"])) == 6, what="every task running")
    mine = sorted(t for t, ws in running_now(procs, ["a", "b"]).items() if ws == ["a"])
    # A second process under a's id (its own journal, so what it runs shows apart).
    impostor = procs.start("impostor", [
        str(procs_bin()), "run", "--supervisor", sup.endpoint, "--id", "a", "--handler",
        "log", "--journal", str(procs.tmp / "impostor.journal"), "--report-interval", "0.5"])
    assert impostor.wait(30) == 3, impostor.output()[-2000:]  # refused: exit status 3
    assert "two live workers use id 'a'" in impostor.output()
    assert not (procs.tmp / "impostor.journal").exists() or not [
        e for e in journal(procs, "impostor") if e["event"] == "start"]
    assert [e for e in journal(procs, "a") if e["event"] == "stop"] == []
    assert sorted(t for t, ws in running_now(procs, ["a"]).items()) == mine
    row = next(w for w in sup.ctl("workers")["workers"] if w["id"] == "a")
    assert row["conflict"] and sup.ctl("counters")["duplicate_ids"] == 1


def procs_bin() -> object:
    from .procs import BIN

    return BIN / "corral-worker"


HANDLER = '''
import json, os

class Recorder:
    """Writes each start's spec where the test can read it."""

    def start(self, task, spec):
        with open(os.path.join(os.environ["OUT"], task + ".python"), "a") as f:
            f.write(json.dumps(spec, sort_keys=True) + "\\n")

    def stop(self, task):
        pass
'''


def write_tasks(path: Path, bitrate: int) -> None:
    write_json(path, [{"id": f"cam-{i}", "spec": {"url": f"rtsp://cam-{i}", "bitrate": bitrate}}
                      for i in (1, 2)])


@pytest.mark.timeout(120)
def test_a_changed_spec_restarts_exec_and_python_tasks_with_it(procs: Procs) -> None:
    out = procs.tmp / "out"
    out.mkdir()
    (procs.tmp / "recorder.py").write_text(HANDLER)
    tasks = procs.tmp / "tasks.json"
    write_tasks(tasks, 500)
    sup = Supervisor(procs, f"file:{tasks}", lease=LEASE, lease_margin=MARGIN, tick=TICK,
                     expect_workers=2, warmup=10, replicas=2)
    cmd = ("sh -c 'printf \"%s\\n\" \"$CORRAL_TASK_SPEC\" >> \"$0/$CORRAL_TASK.exec\"; "
           f"exec sleep 600' {out}")
    start_worker(procs, sup, "ex", 10, "--handler", "exec", "--exec", cmd, "--stop-grace", "1")
    procs.start("py", [str(procs_bin()), "run", "--supervisor", sup.endpoint, "--id", "py",
                       "--handler", "python:recorder:Recorder", "--journal",
                       str(procs.tmp / "py.journal"), "--report-interval", "0.5"],
                env={"PYTHONPATH": str(procs.tmp), "OUT": str(out)})

    def specs(kind: str, task: str) -> list[dict[str, object]]:
        f = out / f"{task}.{kind}"
        return [json.loads(x) for x in f.read_text().splitlines()] if f.exists() else []

    def seen(kind: str, bitrate: int) -> bool:
        return all(specs(kind, t) and specs(kind, t)[-1].get("bitrate") == bitrate
                   for t in ("cam-1", "cam-2"))

    wait_until(lambda: seen("exec", 500) and seen("python", 500), timeout=40,
               what="both tasks started on both workers with the first spec")
    assert specs("exec", "cam-1")[-1] == {"bitrate": 500, "url": "rtsp://cam-1"}
    write_tasks(tasks, 2000)  # the file source is watched: no query needed
    wait_until(lambda: seen("exec", 2000) and seen("python", 2000), timeout=20,
               what="both tasks restarted with the new spec")
    for task in ("cam-1", "cam-2"):  # a new version: a new spec hash, a newer token
        starts = [e for e in journal(procs, "ex") if e["event"] == "start" and e["task"] == task]
        assert len(starts) == 2 and starts[0]["spec"] != starts[1]["spec"]
        assert starts[1]["token"] > starts[0]["token"]
    assert sup.ctl("counters")["spec_changes"] == 2
