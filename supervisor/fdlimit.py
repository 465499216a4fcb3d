"""The open-file limit, which caps the fleet: every worker connection is one file descriptor
of the supervisor (its ZeroMQ I/O thread polls them with epoll, so their number is not
otherwise bounded).

The usual soft limit is 1,024 (systemd's default), which refuses the thousandth worker's
connection. At start the supervisor raises its soft limit to the hard one, as Go's runtime
does, and warns when even that leaves little room (the service manager's ``LimitNOFILE`` is
the knob: docs/operations.md "Sizing").
"""

from __future__ import annotations

import resource

ROOM = 8192  # below this many, a warning: a fleet of thousands would be refused


def raise_soft_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (before, after). A limit
    the system will not raise is left as it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        # An infinite hard limit still has a ceiling (fs.nr_open): ask for a large finite one.
        target = hard if hard != resource.RLIM_INFINITY else 1 << 20
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft
