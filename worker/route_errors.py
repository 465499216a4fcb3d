"""What a `Router` call raises when it cannot give a reply: one class per reason, each with
one sentence that names the task (or key), the worker and the map version involved."""

from __future__ import annotations

from corral.common.errors import CorralError


class RouteError(CorralError):
    """A request could not be routed, or was not answered with a result."""


class MapUnavailable(RouteError):
    """The router holds no map and the supervisor's control endpoint gave none."""


class NoOwner(RouteError):
    """The map has no such task, or no worker that serves requests runs it."""


class Unavailable(RouteError):
    """Every candidate worker is refusing connections, a lame duck (for ``call_any``) or at
    the flow-control limit of requests in flight from this client."""


class CallTimeout(RouteError, TimeoutError):
    """No reply within the call's timeout. The request may still have been served."""


class NotOwner(RouteError):
    """A worker said ``not_owner`` again after a map refresh and the one retry."""


class RemoteError(RouteError):
    """The worker's handler raised while serving the request; the message carries its error."""
