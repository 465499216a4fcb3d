"""The README, walked (issue 32): the commands of its by-hand section and of its fleet across
zones, as written there, on loopback — each must end well and print no traceback. What cannot
be the same here is substituted, and only that: the venv that exists, free ports for the
README's 7760/7761 and its hosts' 10.0.x.5, a folder for /etc/corral, a stub for the
recorder program, six workers' ids and zones in the one worker file it shows."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from ..support import Proc, free_port, wait_until
from .procs import BIN, Procs

pytestmark = pytest.mark.e2e

README = Path(__file__).resolve().parents[2] / "README.md"


def blocks(after: str) -> list[tuple[str, str]]:
    """The fenced blocks (language, text) of the README section that starts at ``after``, up
    to the next heading."""
    text = README.read_text()
    section = text[text.index(after):]
    heading = re.search(r"\n#{2,3} ", section[1:])  # (a "# comment" in a block is no heading)
    section = section[:heading.start() + 1] if heading else section
    return re.findall(r"```(\w*)\n(.*?)```", section, re.S)


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


class Walk:
    """Runs README commands in a folder: ``… &`` in the background (stopped by pid with the
    test's `Procs`), the rest to their end — each must exit 0 without a traceback."""

    def __init__(self, procs: Procs, subs: dict[str, str]) -> None:
        self.procs, self.subs, self.n = procs, subs, 0
        self.env = {**os.environ, "XDG_STATE_HOME": str(procs.tmp / "state"),
                    "CORRAL_LOG_JSON": "1"}

    def sub(self, command: str) -> str:
        for old, new in self.subs.items():
            command = command.replace(old, new)
        return command

    def run(self, command: str, readme: bool = True) -> str:
        """Run ``command`` (a README line, substituted; else the test's own)."""
        command = self.sub(command) if readme else command
        self.n += 1
        if command.endswith("&"):
            args = shlex.split(command[:-1])
            self.procs.all.append(Proc(args, self.procs.tmp / f"bg-{self.n}.log", self.env,
                                       cwd=self.procs.tmp))
            if "corral-supervisor" in args[0]:  # as a person would: a moment for it to start
                wait_until(lambda: subprocess.run(
                    [str(BIN / "corralctl"), "status"], env=self.env, capture_output=True,
                    timeout=60).returncode == 0, timeout=30, what="the supervisor answers")
            return ""
        out = subprocess.run(["bash", "-c", command], cwd=self.procs.tmp, env=self.env,
                             capture_output=True, text=True, timeout=60)
        said = out.stdout + out.stderr
        assert out.returncode == 0 and "Traceback" not in said, f"{command}: {said}"
        return out.stdout

    def healthy(self) -> None:
        """No background process died or printed a traceback."""
        for p in self.procs.all:
            assert p.alive() and "Traceback" not in p.output(), p.output()[-2000:]


def test_the_by_hand_section(procs: Procs) -> None:
    (block,) = [b for lang, b in blocks("By hand, on one machine") if not lang]
    cmds = commands(block)
    assert cmds[0].startswith("python3 -m venv .venv")  # the venv: ours, already made
    endpoint, control = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    walk = Walk(procs, {".venv/bin/": f"{BIN}/", "tcp://127.0.0.1:7760": endpoint})
    walk.env.update(CORRAL_BIND=endpoint, CORRAL_CONTROL=control)  # the default ports, moved
    for cmd in cmds[1:]:
        walk.run(cmd)
    ctl = f"{BIN}/corralctl -o json assignments"

    def assigned() -> bool:
        rooms = json.loads(walk.run(ctl, readme=False))["assignments"]
        return len(rooms) == 6 and all(rooms.values())

    wait_until(assigned, timeout=40, what="the six rooms assigned")
    table = walk.run(f"{BIN}/corralctl assignments", readme=False)
    assert table.startswith("version ") and "room-6" in table
    walk.healthy()


def test_the_fleet_across_zones(procs: Procs) -> None:
    found = blocks("### A fleet across zones")
    toml = next(b for lang, b in found if lang == "toml")
    tasks = next(b for lang, b in found if lang == "json")
    cmds = commands(next(b for lang, b in found if not lang))
    etc = procs.tmp / "etc"
    etc.mkdir()
    (etc / "tasks.json").write_text(tasks)
    recorder = procs.tmp / "recorder"
    recorder.write_text("#!/bin/sh\nexec sleep 1000\n")
    recorder.chmod(0o755)
    endpoint = f"127.0.0.1:{free_port()}"
    walk = Walk(procs, {"/etc/corral": str(etc), "10.0.0.5:7760": endpoint,
                        "/usr/local/bin/recorder": str(recorder), "corral-": f"{BIN}/corral-",
                        "corralctl ": f"{BIN}/corralctl "})
    walk.env["CORRAL_CONTROL"] = f"tcp://127.0.0.1:{free_port()}"
    assert re.search(r'^id = "', toml, re.M), "the worker file names its id"
    sup, worker = cmds[0], cmds[1]
    assert sup.startswith("corral-supervisor run") and worker.startswith("corral-worker run")
    walk.run(sup + " &")
    for i, zone in enumerate(["eu-1", "eu-2", "eu-3"] * 2):
        text = walk.sub(toml)
        text = re.sub(r'^id = ".*?"', f'id = "{zone}-host-{i}"', text, flags=re.M)
        text = re.sub(r'^zone = "eu-1/', f'zone = "{zone}/', text, flags=re.M)
        text = re.sub(r'^supervisor = ".*?"', f'supervisor = "tcp://{endpoint}"', text,
                      flags=re.M)
        if i:  # one GPU host: the label only where it is true
            text = text.replace('gpu = "true"', '')
        host = etc / f"host-{i}"  # each host has its own /etc/corral/worker.toml
        host.mkdir()
        (host / "worker.toml").write_text(text)
        walk.run(worker.replace("/etc/corral", str(host)) + " &")
    for cmd in cmds[2:]:
        walk.run(cmd)

    def spread() -> bool:
        out = json.loads(walk.run(f"{BIN}/corralctl -o json tasks", readme=False))["tasks"]
        zones = {w["id"]: w["zone"] for w in
                 json.loads(walk.run(f"{BIN}/corralctl -o json workers", readme=False))["workers"]}
        rooms = [t for t in out if t["task"].startswith("room-")]
        return len(rooms) == 2 and all(
            len(t["running_on"]) == 2 and len({zones[w].split("/")[0] for w in t["owners"]}) == 2
            for t in rooms) and next(t for t in out if t["task"] == "transcribe-1"
                                     )["running_on"] == ["eu-1-host-0"]
    wait_until(spread, timeout=60, what="each room twice, in two zones; transcribe on the GPU")
    workers = walk.run(f"{BIN}/corralctl workers", readme=False)
    assert "eu-2/rack-7/host-3" in workers
    walk.healthy()
