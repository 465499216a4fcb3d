"""Deprecated: the Router moved to `corral.client` (``from corral.client import Router,
RouterConfig``). This module re-exports it for one release and warns on import."""

from __future__ import annotations

import warnings

from corral.client.router import Router, RouterConfig

warnings.warn("corral.worker.router moved to corral.client; import Router and RouterConfig "
              "from corral.client (this alias goes away in the next release)",
              DeprecationWarning, stacklevel=2)

__all__ = ["Router", "RouterConfig"]
