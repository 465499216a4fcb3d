"""Errors at start, not at first use (issue 32), through the real command lines (click's
runner, in-process: cheap enough to try every case): one line naming the option, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from corral.supervisor.cli import main as supervisor
from corral.worker.cli import main as worker

T = ["--tasks", "file:/dev/null"]
W = ["--supervisor", "tcp://127.0.0.1:9"]


@pytest.mark.parametrize(("cli", "args", "says"), [
    (supervisor, [*T, "--authorized-keys", "/tmp"],
     "authorized_keys: --authorized-keys needs --curve-secret-key (the supervisor's key pair)"),
    (supervisor, [*T, "--control-keys", "/tmp"],
     "control_keys: --control-keys needs --curve-secret-key (the supervisor's key pair)"),
    (supervisor, ["--tasks", "file:/nonexistent/tasks.txt"],
     "tasks: /nonexistent/tasks.txt: no such file (create it, or give --allow-empty to start "
     "with no tasks)"),
    (worker, [*W, "--handler", "exec", "--exec", "rec {task} {spec.url}"],
     "exec: the program 'rec' is not on PATH (give its full path)"),
    (worker, [*W, "--handler", "exec", "--exec", "sleep {task} {spec.url"],
     "exec: '{spec.url' opens a brace it never closes (placeholders: {task}, {spec.KEY})"),
    (worker, [*W, "--handler", "exec", "--exec", "sleep {tasks}"],
     "exec: {tasks} is not a placeholder (placeholders: {task}, {spec.KEY})"),
    (worker, [*W, "--handler", "exec", "--exec", "/etc/passwd {task}"],
     "exec: the program '/etc/passwd' is not an executable file"),
])
def test_a_start_that_cannot_work_is_one_line_naming_the_option(
        cli: object, args: list[str], says: str, tmp_path: Path) -> None:
    out = CliRunner().invoke(cli, ["run", *args],  # type: ignore[arg-type]
                             env={"XDG_STATE_HOME": str(tmp_path)})
    assert out.exit_code == 2, out.output
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and f"configuration error: {says}" in lines[0], out.output
