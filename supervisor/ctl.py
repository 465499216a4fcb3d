"""`corralctl`: inspect and steer a running supervisor."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Inspect and steer a running corral supervisor (not built yet)."""


@main.command()
def status() -> None:
    """Show the supervisor's phase, epoch and counts (not built yet)."""
    click.echo("corralctl: not built yet (see issue 3)", err=True)
    sys.exit(1)
