"""click options from the settings table: one per setting, for every corral daemon."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from corral.cli.settings import Setting


def click_options(settings: Sequence[Setting]) -> Callable[[Any], Any]:
    """Decorate a click command with one option per setting. Each option defaults to None so
    `resolve` can tell "not given" from "given"; ``--help`` shows the real default and the
    environment variable."""
    def decorate(fn: Any) -> Any:
        for s in reversed(settings):
            shown = "" if s.default is None or s.default == "" else f" [default: {s.default}]"
            extra = f"{s.help}{shown} (env {s.env})"
            if s.kind == "bool":
                fn = click.option(f"{s.flag}/--no-{s.flag[2:]}", s.name, default=None, help=extra)(
                    fn
                )
            else:
                metavar = s.metavar or {"seconds": "SECONDS", "int": "N", "number": "X"}.get(
                    s.kind, "TEXT"
                )
                kind: Any = click.Choice(s.choices) if s.choices else click.STRING
                fn = click.option(
                    s.flag, s.name, type=kind, default=None, metavar=metavar, help=extra
                )(fn)
        return fn

    return decorate
