"""How corralctl writes for people: one formatter for every table and list, columns measured in
terminal cells (a CJK id or an emoji takes two, a combining accent none: wcwidth), and nothing
a terminal would obey. Ids, reasons and errors come from workers and task sources; a captured
``ESC[2J`` must show as text, not clear the screen — like kubectl, every non-printable
character is written as its escape (``\\x1b``, ``\\u202e``).

    >>> print(table([["wörker-1", "ready"], ["工人-2", "inactive"]], ["WORKER", "STATE"]))
    WORKER    STATE
    wörker-1  ready
    工人-2    inactive
    >>> printable("a\\x1b[2Jb")
    'a\\\\x1b[2Jb'
    >>> print(pairs({"impostor_reports": 0, "balanced": True, "leader": None}))
    impostor_reports  0
    balanced          true
    leader            -
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from wcwidth import wcswidth

# Categories a terminal may act on or that show nothing: controls (Cc: ESC, CR, BS…), format
# characters (Cf: bidi overrides, zero-width), surrogates, private use, unassigned, and the
# line and paragraph separators.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on, or not show, escaped."""
    if text.isprintable():  # the usual case, in C
        return text
    out = []
    for ch in text:
        if unicodedata.category(ch) in _HIDDEN:
            n = ord(ch)
            out.append(f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000
                       else f"\\U{n:08x}")
        else:
            out.append(ch)
    return "".join(out)


def cell(value: Any) -> str:
    """A value as people read it: text as it is, numbers plain, true/false, ``-`` for none,
    lists joined by commas, objects as compact JSON — never a Python repr; escaped."""
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, list | tuple):
        text = ", ".join(cell(v) for v in value) or "-"
    elif isinstance(value, dict):
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    else:
        text = str(value)
    return printable(text)


def width(text: str) -> int:
    """The cells ``text`` takes on a terminal (its length, for what wcwidth cannot measure)."""
    n = wcswidth(text)
    return n if n >= 0 else len(text)


def pad(text: str, cells: int) -> str:
    return text + " " * max(0, cells - width(text))


def table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """Rows under a header, each column as wide as its widest cell, two spaces between."""
    shown = [[cell(c) for c in r] for r in [header, *rows]]
    widths = [max(width(r[i]) for r in shown) for i in range(len(header))]
    return "\n".join("  ".join(pad(c, w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in shown)


def pairs(values: Mapping[str, Any]) -> str:
    """``key  value`` lines, the values in one column."""
    if not values:
        return ""
    keys = [cell(k) for k in values]
    w = max(width(k) for k in keys)
    return "\n".join(f"{pad(k, w)}  {cell(v)}".rstrip()
                     for k, v in zip(keys, values.values(), strict=True))
