"""docs/operations.md's security model names, for each threat, the test that shows it: every
test it names exists (a renamed or deleted test fails here, not silently in the docs)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_test_the_security_model_names_exists() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Security model"):text.index("## Faults")]
    named: list[tuple[str, str]] = []
    for row in section.splitlines():
        path = None
        for m in re.finditer(r"`(tests/[\w/]+\.py)?::(\w+)`", row):
            path = m.group(1) or path  # "`::name`" continues the file named before it
            assert path, row
            named.append((path, m.group(2)))
    assert len(named) >= 15
    missing = [f"{p}::{n}" for p, n in named
               if not (ROOT / p).exists() or f"def {n}(" not in (ROOT / p).read_text()]
    assert missing == []
