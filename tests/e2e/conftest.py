from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .procs import Procs


@pytest.fixture()
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()
