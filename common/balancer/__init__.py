"""The balancer core (the SRE book, chapter 20): backend health, flow control, subsetting,
pickers (round robin, least-loaded, weighted), replica choice and consistent hashing. Pure:
time and randomness are parameters. `Balancer` composes them for a client; the modules are
usable alone. See docs/balancer.md.
"""

from .backends import BackendEvent, BackendState, HealthConfig
from .balancer import Balancer, BalancerConfig, NoBackendAvailable, Request
from .weights import LoadReport, WeightConfig

__all__ = ["BackendEvent", "BackendState", "Balancer", "BalancerConfig", "HealthConfig",
           "LoadReport", "NoBackendAvailable", "Request", "WeightConfig"]
