"""`corral-sim`: simulations of subsetting and load-balancing policies (SRE book, chapter 20).

A thin click layer: it parses, checks, calls `simulate_subsetting`, `compare_resizes`,
`simulate_tradeoff` or `simulate_policies`, and prints a text report, one JSON object
(``-o json``) or a PNG (``--plot``, needs matplotlib).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from corral.cli.usage import CONTEXT, OneLineErrors
from corral.common.balancer.subsetting import ALGORITHMS, DEFAULT_LOT_SIZE
from corral.sim.histogram import (
    PlotUnavailable,
    plot_bars,
    plot_points,
    require_matplotlib,
    text_histogram,
)
from corral.sim.policies_sim import POLICIES, PolicyResult, RunConfig, simulate_policies
from corral.sim.resize_sim import ResizeReport, compare_resizes
from corral.sim.subsetting_sim import SubsettingResult, simulate_subsetting, simulate_tradeoff
from corral.sim.world import FleetConfig

OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: a report with histograms; json: one JSON object on stdout.",
)
PLOT = click.option(
    "--plot",
    "plot",
    metavar="FILE.png",
    default=None,
    help="Also write a PNG bar chart (one bar per backend) to FILE.png. Needs matplotlib: "
    "pip install 'corral[plot]'. [default: no plot]",
)
SEED = click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of every random choice; the same seed gives the same numbers.",
)


F = TypeVar("F", bound=Callable[..., Any])


def _number(
    name: str, default: float, text: str, kind: click.ParamType[Any, Any] | None = None
) -> Callable[[F], F]:
    """A numeric option that shows its default; a whole number of at least 1 unless ``kind``
    says otherwise."""
    kind = kind or click.IntRange(min=1)
    return click.option(name, type=kind, default=default, show_default=True, help=text)


def _check_plot(plot: str | None) -> None:
    """Fail before a long simulation, not after it, if --plot cannot work."""
    if plot is None:
        return
    try:
        require_matplotlib()
    except PlotUnavailable as e:
        click.echo(f"corral-sim: {e}", err=True)
        sys.exit(1)


@click.group(cls=OneLineErrors, context_settings=CONTEXT)
def main() -> None:
    """Simulate corral's balancer core: how subsetting spreads connections, and how the
    load-balancing policies spread CPU load (SRE book, chapter 20). Run a subcommand with
    --help for its options."""


@main.command()
@_number("--clients", 300, "Client tasks, indexes 0..C-1.")
@_number("--backends", 300, "Backend tasks.")
@_number("--subset-size", 30, "Backends per client (K).")
@click.option(
    "--algo",
    type=click.Choice(ALGORITHMS),
    default=None,
    help="random: shuffle once, take the first K; deterministic: the chapter's "
    "Subset(); low-churn: lots with van der Corput starts; stable: low-churn in arcs; "
    "steady: indexed backends in blocks. [default: deterministic; with --resize, every one]",
)
@SEED
@click.option(
    "--resize",
    "resize",
    type=click.IntRange(min=1),
    default=None,
    metavar="B2",
    help="Resize to B2 backends one at a time and report, for every algorithm (or --algo's "
    "alone: a histogram and the churn of one resize to B2), the spread of connections, the "
    "cumulative churn against its minimum, and the most connections one client lost in a step "
    "and when any one backend leaves or joins. [default: no resize]",
)
@click.option(
    "--lot-size",
    type=click.IntRange(min=1),
    default=DEFAULT_LOT_SIZE,
    show_default=True,
    help="Clients per lot for low-churn (a power of two).",
)
@click.option(
    "--tradeoff",
    is_flag=True,
    default=False,
    help="Instead: every algorithm (and stable with 2 to 8 arcs) through --steps one-backend "
    "scale-ups from --backends; the spread of connections before, the cumulative churn and its "
    "minimum. --plot draws churn against spread. [default: off]",
)
@_number("--steps", 30, "One-backend scale-ups for --tradeoff.")
@OUTPUT
@PLOT
def subsetting(
    clients: int,
    backends: int,
    subset_size: int,
    algo: str,
    seed: int,
    resize: int | None,
    lot_size: int,
    tradeoff: bool,
    steps: int,
    output: str,
    plot: str | None,
) -> None:
    """Connections per backend under a subsetting algorithm: min / mean / max, min÷mean and
    max÷mean, and a histogram (the chapter's figures 20-3 to 20-5); or (the trade-off flag) what
    each algorithm pays in balance for low churn over repeated small resizes."""
    _check_plot(plot)
    if tradeoff:
        _tradeoff(clients, backends, subset_size, steps, seed, lot_size, output, plot)
        return
    if resize is not None and algo is None:
        _resizes(clients, backends, resize, subset_size, seed, lot_size, output)
        return
    algo = algo or "deterministic"
    try:
        result = simulate_subsetting(algo, clients, backends, subset_size, seed, resize, lot_size)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if output == "json":
        click.echo(json.dumps(result.to_json()))
    else:
        click.echo("\n".join(_subsetting_text(result)))
    if plot:
        title = f"{algo} subsetting: {clients} clients, {subset_size} of {backends} backends"
        plot_bars(plot, {title: result.counts}, ylabel="connections")
        if output == "text":
            click.echo(f"wrote {plot}")


def _tradeoff(clients: int, backends: int, subset_size: int, steps: int, seed: int,
              lot_size: int, output: str, plot: str | None) -> None:  # fmt: skip
    try:
        rows = simulate_tradeoff(clients, backends, subset_size, steps, seed, lot_size)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if output == "json":
        doc = {"clients": clients, "backends": backends, "subset_size": subset_size,
               "steps": steps, "variants": [r.to_json() for r in rows]}  # fmt: skip
        click.echo(json.dumps(doc))
    else:
        click.echo(f"{clients} clients, {subset_size} of {backends} → {backends + steps} "
                   f"backends, one at a time")  # fmt: skip
        click.echo(f"{'variant':<26} {'min÷mean':>8} {'max÷mean':>8} {'churn':>8} "
                   f"{'minimum':>8} {'÷ minimum':>9}")  # fmt: skip
        for r in rows:
            click.echo(f"{r.label:<26} {r.min_over_mean:>8.2f} {r.max_over_mean:>8.2f} "
                       f"{r.churn:>8.1%} {r.minimum:>8.1%} {r.churn / r.minimum:>9.2f}")
    if plot:
        points = {r.label: (r.max_over_mean - r.min_over_mean, r.churn / r.minimum)
                  for r in rows if r.churn / r.minimum < 20}  # fmt: skip
        title = (f"{steps} one-backend scale-ups from {backends} backends, K = {subset_size}, "
                 f"{clients} clients")  # fmt: skip
        plot_points(plot, points, title, xlabel="spread: (max − min) ÷ mean connections",
                    ylabel="cumulative churn ÷ its minimum")  # fmt: skip
        if output == "text":
            click.echo(f"wrote {plot}")


def _resizes(clients: int, backends: int, resize: int, subset_size: int, seed: int,
             lot_size: int, output: str) -> None:  # fmt: skip
    try:
        rows = compare_resizes(clients, backends, resize, subset_size, seed, lot_size)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if output == "json":
        click.echo(json.dumps({"clients": clients, "backends": backends, "resize_to": resize,
                               "subset_size": subset_size,
                               "variants": [r.to_json() for r in rows]}))  # fmt: skip
        return
    click.echo("\n".join(resize_table(rows, clients, backends, resize, subset_size)))


def resize_table(rows: list[ResizeReport], clients: int, backends: int, resize: int,
                 subset_size: int) -> list[str]:  # fmt: skip
    """The text table of `compare_resizes` (scripts/bench subsetting prints it too)."""
    lines = [f"{clients} clients, K = {subset_size}: {backends} → {resize} backends one at a "
             f"time; before it, connections per backend min–max (spread)",
             f"{'variant':<28} {'min–max':>9} {'spread':>6} {'churn':>8} {'minimum':>8} "
             f"{'÷ min':>6} {'lost/step':>9} {'lost/any':>8}"]
    for r in rows:
        lines.append(f"{r.label:<28} {f'{r.min}–{r.max}':>9} {r.spread:>6} {r.churn:>8.2%} "
                     f"{r.minimum:>8.2%} {r.churn / r.minimum if r.minimum else 0:>6.2f} "
                     f"{r.step_loss:>9} {r.single_loss:>8}")  # fmt: skip
    lines.append("lost/step: the most connections one client lost in a step; lost/any: when "
                 "any one backend left (each in turn) or one joined, before the first step")
    return lines


def _subsetting_text(r: SubsettingResult) -> list[str]:
    j = r.to_json()
    lines = [
        f"{r.algorithm} subsetting: {r.clients} clients, {r.subset_size} of {r.backends} backends",
        f"connections per backend: min {r.min}  mean {r.mean:.2f}  max {r.max}"
        f"  (min÷mean {j['min_over_mean']:.0%}, max÷mean {j['max_over_mean']:.0%})",
        "",
        "backends by connections:",
        *text_histogram(r.counts),
    ]
    if r.churn is not None and r.ideal_churn is not None:
        lines += [
            "",
            f"resize {r.backends} → {r.resize_to} backends: churn {r.churn:.2%} of connections"
            f" (ideal {r.ideal_churn:.2%}, {r.churn / r.ideal_churn:.1f}× ideal)"
            if r.ideal_churn
            else f"resize {r.backends} → {r.resize_to}: churn {r.churn:.2%}",
        ]
    return lines


@main.command()
@click.option(
    "--policy",
    type=click.Choice([*POLICIES, "all"]),
    default="all",
    show_default=True,
    help="rr: round robin; llrr: least-loaded round robin counting recent errors; "
    "llrr-naive: without counting errors; wrr: weighted round robin; p2c: power of "
    "two choices; random; all: each in turn on the same fleet.",
)
@_number(
    "--clients", 100, "Client tasks (M), with Poisson request rates log-uniform over a 10× range."
)
@_number("--backends", 100, "Backend tasks (N), each with 4 cores on one of three CPU platforms.")
@_number("--subset-size", 20, "Backends per client (K), by deterministic subsetting.")
@SEED
@click.option(
    "--failing-backend",
    is_flag=True,
    default=False,
    show_default=True,
    help="Make one backend fail every request fast (1 ms, no CPU). [default: off]",
)
@_number(
    "--duration",
    30.0,
    "Simulated seconds measured.",
    click.FloatRange(min=0, min_open=True),
)
@_number(
    "--warmup",
    20.0,
    "Simulated seconds before measuring (wrr trusts a weight after 10 s).",
    click.FloatRange(min=0),
)
@_number(
    "--load",
    0.5,
    "Mean CPU utilization if traffic were spread in proportion to capacity.",
    click.FloatRange(0, 1, min_open=True, max_open=True),
)
@_number(
    "--wrr-feedback",
    0.3,
    "Gain of wrr's utilization feedback; 0 leaves capacity-only weights "
    "(qps / (utilization + errors/qps)); at most 1, as more would overshoot.",
    click.FloatRange(0, 1),
)
@OUTPUT
@PLOT
def policies(
    policy: str,
    clients: int,
    backends: int,
    subset_size: int,
    seed: int,
    failing_backend: bool,
    duration: float,
    warmup: float,
    load: float,
    wrr_feedback: float,
    output: str,
    plot: str | None,
) -> None:
    """Discrete-event simulation of clients balancing requests over their subsets, with
    machine diversity, query costs varying 1000×, clients of different rates and optionally
    a fast-failing backend. Reports per policy: CPU utilization per backend, max÷min spread,
    wasted capacity, error rate, latency p50 / p99, and the failing backend's share."""
    _check_plot(plot)
    try:
        fleet = FleetConfig(
            backends=backends,
            clients=clients,
            subset_size=subset_size,
            seed=seed,
            failing_backend=failing_backend,
            load=load,
        )
        run = RunConfig(duration=duration, warmup=warmup)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    chosen = POLICIES if policy == "all" else (policy,)
    if output == "text":
        click.echo(f"simulating {', '.join(chosen)} for {warmup + duration:g} s each …", err=True)
    results = simulate_policies(chosen, fleet, run, wrr_feedback)
    if output == "json":
        doc: dict[str, Any] = {"backends": backends, "clients": clients}
        doc.update({p: r.to_json() for p, r in results.items()})
        click.echo(json.dumps(doc))
    else:
        click.echo("\n".join(_policies_text(fleet, results)))
    if plot:
        panels = {
            f"{p}: CPU max÷min {r.cpu_max_over_min:.2f}": r.utilization for p, r in results.items()
        }
        plot_bars(plot, panels, ylabel="CPU utilization")
        if output == "text":
            click.echo(f"wrote {plot}")


def _policies_text(fleet: FleetConfig, results: dict[str, PolicyResult]) -> list[str]:
    lines = [
        f"{fleet.clients} clients, {fleet.backends} backends, subsets of {fleet.subset_size}"
        + (", one backend failing fast" if fleet.failing_backend else ""),
        "",
        f"{'policy':<11} {'CPU max÷min':>11} {'wasted':>7} {'errors':>7} {'p50 ms':>7} "
        f"{'p99 ms':>7} {'failing share':>13}",
    ]
    for p, r in results.items():
        share = r.failing_backend_share
        lines.append(
            f"{p:<11} {r.cpu_max_over_min:>11.2f} {r.wasted_fraction:>7.1%} {r.error_rate:>7.2%}"
            f" {r.latencies_ms[0]:>7.1f} {r.latencies_ms[1]:>7.1f}"
            f" {'-' if share is None else f'{share:.2%}':>13}"
        )
    if fleet.failing_backend:
        lines.append(f"(a fair share for the failing backend is about {1 / fleet.backends:.2%})")
    for p, r in results.items():
        lines += ["", f"{p}: backends by CPU utilization", *text_histogram(r.utilization, 10)]
    return lines
