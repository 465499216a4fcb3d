"""corral's client library: the control-channel client and the request `Router`
(docs/routing.md; `corralctl`: docs/supervisor.md).

Importable by any program; it needs only `corral.common`::

    from corral.client import ControlClient, Router, RouterConfig
"""

from typing import TYPE_CHECKING, Any

from .control import ControlClient, CurveKeys
from .errors import (
    CallTimeout,
    ControlFailed,
    MapUnavailable,
    NoOwner,
    NotOwner,
    RemoteError,
    RouteError,
    Unavailable,
    Unreachable,
)

if TYPE_CHECKING:
    from .router import Router, RouterConfig


def __getattr__(name: str) -> Any:
    """`Router` and `RouterConfig` are imported when first asked for: the router pulls in the
    balancer core, which `corralctl` (a control client, started for every command) never
    uses and would spend a third of its start time importing."""
    if name in ("Router", "RouterConfig"):
        from . import router

        return getattr(router, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CallTimeout",
    "ControlClient",
    "ControlFailed",
    "CurveKeys",
    "MapUnavailable",
    "NoOwner",
    "NotOwner",
    "RemoteError",
    "RouteError",
    "Router",
    "RouterConfig",
    "Unavailable",
    "Unreachable",
]
