"""corral's client library: the control-channel client and the request `Router`.

Importable by any program; it needs only `corral.common`::

    from corral.client import ControlClient, Router, RouterConfig
"""

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
from .router import Router, RouterConfig

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
