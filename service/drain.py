"""The drain state of one process: whether it is shutting down.

service/health.py sets it (`begin_drain`, on SIGTERM or app shutdown) and fails readiness
while it is set; it lives in `app[DRAIN]`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DrainState:
    """Whether this process is shutting down (readiness then fails)."""

    draining: bool = False
