"""What the client raises: the control client's two failures, and one class per reason a
`Router` call cannot give a reply — each with one sentence that names the task (or key), the
worker and the map version involved."""

from __future__ import annotations

from corral.common.errors import CorralError
from corral.common.wire.protocol import ControlError


class Unreachable(CorralError):
    """No answer from the supervisor (or from no leader among several) within the timeout."""


class ControlFailed(CorralError):
    """The supervisor answered with an error (``error.code`` is a stable `ERR_*` code)."""

    def __init__(self, error: ControlError) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error


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
