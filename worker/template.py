"""The ``exec`` handler's command template, checked once at start (docs/worker.md, "exec").

``--exec "recorder --room {task} --url {spec.stream.url}"`` is split with shell rules and run
without a shell; ``{task}`` and ``{spec.KEY}`` (``{spec.a.b}``: nested) are its placeholders.
`check` finds, before the worker starts, what would otherwise fail every task at its first
start: a command line that does not split, a brace left open or a placeholder misspelt, a
program that is not there. Each is one sentence naming the culprit.

    >>> check("sleep {task}")
    ['sleep', '{task}']
    >>> check("rec {task} {spec.url", which=lambda p: "/bin/" + p)
    Traceback (most recent call last):
    ...
    ValueError: '{spec.url' opens a brace it never closes (placeholders: {task}, {spec.KEY})
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Callable

PLACEHOLDER = re.compile(r"\{task\}|\{spec\.([^{}\s]+)\}")
# Something meant as a placeholder but not one: {tasks}, {spec}, {spec.}, {Task} …
_NEAR_MISS = re.compile(r"\{\s*(task|spec)[^{}]*\}", re.IGNORECASE)


def check(template: str, which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The template split into arguments; ValueError with one sentence if it cannot work."""
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise ValueError(f"not a valid command line ({exc})") from None
    if not argv:
        raise ValueError("must name a command")
    for arg in argv:
        rest = PLACEHOLDER.sub("", arg)
        near = _NEAR_MISS.search(rest)
        if near:
            raise ValueError(f"{near.group(0)} is not a placeholder (placeholders: {{task}}, "
                             "{spec.KEY})")
        opened, closed = rest.count("{"), rest.count("}")
        if opened != closed:
            what = "opens a brace it never closes" if opened > closed else \
                "closes a brace it never opened"
            raise ValueError(f"{arg!r} {what} (placeholders: {{task}}, {{spec.KEY}})")
    program = argv[0]
    if PLACEHOLDER.search(program):
        return argv  # a program chosen per task: only its start can tell
    if "/" in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise ValueError(f"the program {program!r} is not an executable file")
    elif which(program) is None:
        raise ValueError(f"the program {program!r} is not on PATH (give its full path)")
    return argv
