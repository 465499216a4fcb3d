"""`corral-sim`: simulations of subsetting and load-balancing policies."""

from __future__ import annotations

import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Simulate corral's balancer core (not built yet)."""


@main.command()
def subsetting() -> None:
    """Connections per backend under a subsetting algorithm (not built yet)."""
    click.echo("corral-sim subsetting: not built yet (see issue 5)", err=True)
    sys.exit(1)
