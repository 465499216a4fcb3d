"""`corral-worker`: the worker agent's command line."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """The corral worker agent: reports to a supervisor and runs the tasks it is given."""


@main.command()
def run() -> None:
    """Run the worker agent (not built yet)."""
    click.echo("corral-worker run: not built yet (see issue 4)", err=True)
    sys.exit(1)
