"""Sources that tell: a watched file (rename-replace, in-place writes, a broken file in
between). Waits are on conditions, bounded; nothing asserts speed."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.common.tasklist import TaskEntry

from ..e2e.procs import wait_until
from .test_sources import Loop

WITHIN = 10.0  # generous bound for "applied within a second" on a loaded 2-core machine


@pytest.fixture()
def loops() -> Iterator[list[Loop]]:
    made: list[Loop] = []
    try:
        yield made
    finally:
        for loop in made:
            assert loop.fetcher.stop(), "the source's thread did not stop"
        names = {t.name for t in threading.enumerate()}
        assert "task-source" not in names, names


def replace(path: Path, text: str) -> None:
    """Write a new version the safe way: a temporary file renamed over the old one."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def shows(loop: Loop, tasks: dict[str, Any]) -> None:
    wait_until(lambda: loop.lists()[-1:] == [tasks], timeout=WITHIN, what=f"the list {tasks}")


def test_file_changes_are_applied_whichever_way_they_are_written(
    loops: list[Loop], tmp_path: Path
) -> None:
    path = tmp_path / "tasks.json"
    path.write_text('["a"]')
    loop = Loop(f"file:{path}")
    loops.append(loop)
    loop.fetcher.request(reset=True)
    shows(loop, {"a": TaskEntry()})
    replace(path, '[{"id": "b", "spec": {"v": 1}}]')  # a new inode
    shows(loop, {"b": TaskEntry(spec='{"v":1}')})
    path.write_text('[{"id": "b", "spec": {"v": 2}}]')  # in place, same size
    shows(loop, {"b": TaskEntry(spec='{"v":2}')})
    path.write_text('[{"id": "b", "spec": {"v": 3}}]')  # again, at once: the same tick maybe
    shows(loop, {"b": TaskEntry(spec='{"v":3}')})
    assert all(r.error is None for r in loop.seen)
    assert [r.reset for r in loop.seen] == [True, False, False, False]
    assert loop.fetcher.counters.watch_events >= 3


def test_a_broken_file_keeps_the_last_good_list(loops: list[Loop], tmp_path: Path) -> None:
    path = tmp_path / "tasks.toml"
    path.write_text('tasks = ["a", "b"]')
    loop = Loop(f"file:{path}")
    loops.append(loop)
    loop.fetcher.request(reset=True)
    shows(loop, {"a": TaskEntry(), "b": TaskEntry()})
    replace(path, 'tasks = ["a", ')  # half a list: refused, reported once
    wait_until(lambda: loop.seen[-1].error is not None, timeout=WITHIN, what="the error")
    assert "not valid TOML" in str(loop.seen[-1].error) and loop.seen[-1].tasks is None
    replace(path, 'tasks = ["a", "c"]')
    shows(loop, {"a": TaskEntry(), "c": TaskEntry()})
    assert [r.tasks is None for r in loop.seen] == [False, True, False]
    path.unlink()  # gone: one error, the list stays
    wait_until(lambda: loop.seen[-1].error is not None, timeout=WITHIN, what="the error")
    assert "cannot read" in str(loop.seen[-1].error)
    replace(path, 'tasks = ["d"]')
    shows(loop, {"d": TaskEntry()})
    assert loop.fetcher.counters.failures == 2


def test_the_same_content_again_is_no_event(loops: list[Loop], tmp_path: Path) -> None:
    path = tmp_path / "tasks.txt"
    path.write_text("a\n")
    loop = Loop(f"file:{path}")
    loops.append(loop)
    loop.fetcher.request(reset=True)
    shows(loop, {"a": TaskEntry()})
    replace(path, "# the same tasks\na\n")
    wait_until(lambda: loop.fetcher.counters.unchanged >= 1, timeout=WITHIN, what="unchanged")
    replace(path, "a\nb\n")
    shows(loop, {"a": TaskEntry(), "b": TaskEntry()})
    assert len(loop.seen) == 2
