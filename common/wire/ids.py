"""Which characters an id may not hold, and the name of the one that is wrong.

Task ids, worker ids, zones and label keys and values travel in reports, task lists, logs and
`corralctl`'s tables: a control character in one clears a screen, a NUL breaks every ``exec``
command line, a bidi control makes an id read as another. Refused everywhere an id enters:
C0 and C1 controls (NUL, ESC, a line break, …), DEL, the bidi controls (U+061C, U+200E/F,
U+202A-U+202E, U+2066-U+2069) and the line and paragraph separators (U+2028/9).

    >>> bad_char("room-7") is None
    True
    >>> bad_char("line\\nbreak")
    'U+000A (LINE FEED)'
    >>> bad_char("a\\u202eb")
    'U+202E (RIGHT-TO-LEFT OVERRIDE)'
"""

from __future__ import annotations

import re
import unicodedata

FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                       "\u2028\u2029]")

# unicodedata has no names for the C0 and C1 controls: their usual ones.
_C0 = ("NULL", "START OF HEADING", "START OF TEXT", "END OF TEXT", "END OF TRANSMISSION",
       "ENQUIRY", "ACKNOWLEDGE", "BELL", "BACKSPACE", "CHARACTER TABULATION", "LINE FEED",
       "LINE TABULATION", "FORM FEED", "CARRIAGE RETURN", "SHIFT OUT", "SHIFT IN",
       "DATA LINK ESCAPE", "DEVICE CONTROL ONE", "DEVICE CONTROL TWO", "DEVICE CONTROL THREE",
       "DEVICE CONTROL FOUR", "NEGATIVE ACKNOWLEDGE", "SYNCHRONOUS IDLE",
       "END OF TRANSMISSION BLOCK", "CANCEL", "END OF MEDIUM", "SUBSTITUTE", "ESCAPE",
       "FILE SEPARATOR", "GROUP SEPARATOR", "RECORD SEPARATOR", "UNIT SEPARATOR")


def char_name(ch: str) -> str:
    """``U+XXXX (NAME)`` for one character."""
    code = ord(ch)
    if code < 0x20:
        name = _C0[code]
    elif code == 0x7F:
        name = "DELETE"
    else:
        name = unicodedata.name(ch, "C1 CONTROL" if 0x80 <= code <= 0x9F else "UNNAMED")
    return f"U+{code:04X} ({name})"


def bad_char(text: str) -> str | None:
    """The name of the first character an id may not hold, or None."""
    m = FORBIDDEN.search(text)
    return None if m is None else char_name(m.group())


def check_id(text: str, what: str) -> str | None:
    """An error naming what is wrong with ``text`` as ``what`` (an id, a zone, a label), or
    None. Only the characters: lengths are the caller's."""
    ch = bad_char(text)
    if ch is None:
        return None
    shown = repr(text) if len(text) <= 40 else f"{text[:40]!r}…"
    return f"{what} {shown} holds {ch}, which no id may hold"
