"""Command-line usage errors as one clear line: every corral command's click group or command.

click's default for a bad flag or value is three lines (Usage, Try, Error). corral's contract
for bad input is one line naming what is wrong, and exit status 2, like a configuration error.
`OneLineErrors` is the class of the CLIs with subcommands; `OneLineCommand` of those without
(``corral-dashboard``).
"""

from __future__ import annotations

import sys
from typing import Any

import click


class OneLineCommand(click.Command):
    def main(self, args: Any = None, prog_name: str | None = None, complete_var: Any = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:  # an unknown flag, a bad choice, a missing argument
            cmd = exc.ctx.command_path if exc.ctx is not None else (prog_name or self.name)
            click.echo(f"{cmd}: {exc.format_message()}", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"{prog_name or self.name}: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


class OneLineErrors(OneLineCommand, click.Group):
    """`OneLineCommand`'s errors for a group of subcommands."""


# Every corral command: -h as well as --help, and help text wrapped at 100 columns.
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
