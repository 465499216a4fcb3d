"""The world the policy simulation runs in: backends, clients, query costs (docs/balancer.md,
"corral-sim", has the results).

Every number here is an *input*, taken from what SRE chapter 20 says about its datacenters —
none is chosen to make a policy look good or bad, and none encodes a result:

* **Machine diversity.** Backends run on three CPU platforms, 1.0×, 1.25× and 1.5× as fast as
  the slowest (the chapter: machines "with CPUs of varying performance"), and each loses a
  further 0–20 % to antagonistic neighbours ("differences in performance of this nature of up
  to 20 %").
* **Query cost.** CPU cost per request is log-uniform over a 1000× range (the chapter: "the
  most expensive requests consume 1000x (or more) CPU than the cheapest"), scaled to a mean of
  15 ms of CPU on the slowest platform ("queries consume around 15 ms of CPU on average").
* **Waiting.** Besides its CPU, a request spends an exponential time (mean 50 ms) waiting on
  its own downstream calls, which holds it active but uses no CPU (the chapter: requests
  "spend a significant portion of their life just waiting for a response from the network").
* **Client rates.** Clients send Poisson traffic at rates log-uniform over a 10× range (the
  chapter: "all of its clients may not issue requests at the same rate").
* **Cores.** Each backend reserves 4 cores ("each task ... reserves multiple CPU cores").
* **The failing backend** (optional) answers every request with an error after 1 ms, using
  next to no CPU ("it's frequently significantly faster to just return an 'I'm unhealthy!'
  error than to actually process a request").

The offered traffic is set so that, spread in proportion to capacity, mean utilization would
be ``load`` (default 0.5). Subsets come from the chapter's deterministic subsetting.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from corral.common.balancer.subsetting import ALGORITHMS, DETERMINISTIC

PLATFORM_SPEEDS = (1.0, 1.25, 1.5)


@dataclass(frozen=True)
class FleetConfig:
    """The simulated service; the defaults are the chapter's figures (see the module doc)."""

    backends: int = 100
    clients: int = 100
    subset_size: int = 20
    seed: int = 0
    failing_backend: bool = False
    load: float = 0.5  # mean utilization if traffic were spread in proportion to capacity
    cores: int = 4
    mean_cost: float = 0.015  # CPU-seconds per request on the slowest platform
    cost_range: float = 1000.0  # most expensive / cheapest
    mean_wait: float = 0.050  # seconds of downstream waiting per request (no CPU)
    antagonist_loss: float = 0.20  # up to this fraction of a machine's speed is lost
    client_rate_range: float = 10.0  # busiest client / quietest client
    fail_latency: float = 0.001  # how fast the failing backend answers
    subsetting: str = DETERMINISTIC
    platforms: tuple[float, ...] = field(default=PLATFORM_SPEEDS)

    def __post_init__(self) -> None:
        if self.backends < 1 or self.clients < 1 or self.subset_size < 1:
            raise ValueError("backends, clients and subset size must be at least 1")
        if self.failing_backend and self.backends < 2:
            raise ValueError("a failing backend needs at least 2 backends")
        if not 0 < self.load < 1:
            raise ValueError(f"load must be between 0 and 1, not {self.load}")
        if self.subsetting not in ALGORITHMS:
            raise ValueError(f"unknown subsetting {self.subsetting!r}")


@dataclass(frozen=True)
class Fleet:
    """One concrete draw of the world for a `FleetConfig`: the same for every policy."""

    config: FleetConfig
    speeds: tuple[float, ...]  # per backend, relative to the slowest platform
    rates: tuple[float, ...]  # per client, requests per second
    failing: int | None  # the failing backend's index

    @property
    def names(self) -> list[str]:
        return [f"b{i:04d}" for i in range(self.config.backends)]


def cost_sampler(config: FleetConfig, rng: random.Random) -> tuple[float, float]:
    """(cheapest cost, log of the range): cost = cheapest × exp(log_range × U), U ~ U(0, 1),
    whose mean is cheapest × (range − 1) / ln(range), set equal to ``mean_cost``."""
    log_range = math.log(config.cost_range)
    cheapest = config.mean_cost * log_range / (config.cost_range - 1)
    return cheapest, log_range


def build_fleet(config: FleetConfig) -> Fleet:
    rng = random.Random(f"corral-fleet:{config.seed}")
    speeds = tuple(
        rng.choice(config.platforms) * (1 - config.antagonist_loss * rng.random())
        for _ in range(config.backends)
    )
    failing = rng.randrange(config.backends) if config.failing_backend else None
    # Total rate: the load that, spread in proportion to speed, gives `load` utilization.
    capacity = sum(s for i, s in enumerate(speeds) if i != failing) * config.cores
    total_rate = config.load * capacity / config.mean_cost
    log_range = math.log(config.client_rate_range)
    raw = [math.exp(log_range * rng.random()) for _ in range(config.clients)]
    rates = tuple(total_rate * r / sum(raw) for r in raw)
    return Fleet(config, speeds, rates, failing)
