"""`corral-supervisor`: the supervisor daemon's command line."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """The corral supervisor: owns the task list, watches workers, assigns tasks."""


@main.command()
def run() -> None:
    """Run the supervisor daemon (not built yet)."""
    click.echo("corral-supervisor run: not built yet (see issue 3)", err=True)
    sys.exit(1)
