"""The optional fleet-wide cap (ELOVA_LIMIT_FLEET_CONCURRENCY): leased blocks of the fleet's
concurrency, so the whole fleet never holds more than the cap without a Redis call per
request on one shared key. `FleetLease` renews this replica's block (fleet.lua) and bounds
its slots by it; why that keeps the cap exact: docs/decisions/limits.md, "The fleet-wide
cap".
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from redis.exceptions import RedisError

from service.limits.pipeline import Script, ScriptPipeline
from service.limits.replica_slots import ReplicaSlots
from service.observability.metrics.app_metrics import Metrics

log = logging.getLogger("service.limits")

RENEW_SECONDS = 1.0
LEASE_SECONDS = 3.0

_FAILURES = (RedisError, OSError, TimeoutError)


class FleetLease:
    """This replica's block of the fleet cap, renewed every RENEW_SECONDS.

    A renewal (fleet.lua, on the fleet's own keys) asks for the replica's own cap and is
    granted its fair share of the fleet cap (water-filled over the live replicas' asks),
    never more than the others leave free. The grant bounds the replica's slots
    (`ReplicaSlots.resize`) until the lease ends, LEASE_SECONDS after the renewal was sent
    (this replica's clock, so never after Redis's record), unless a later renewal comes
    first. Redis keeps each replica's record for the lease plus the request deadline and
    its grace, so every request admitted under a lease has ended before its record does: a
    replica that is killed or cut off gives its block back then, never earlier. A replica
    that stops gives it back at once.

    A lease that runs out unrenewed leaves the replica no slots, Redis down or not (its
    block may be someone else's by then): it is not ready (`holds_lease`) until a renewal
    answers. Only without Redis at all does a replica hold a fixed share, `fallback`.
    """

    def __init__(
        self,
        pipeline: ScriptPipeline | None,
        slots: ReplicaSlots,
        *,
        key_base: str,
        fleet_cap: int,
        fallback: int,
        hold_seconds: float,
        metrics: Metrics,
    ) -> None:
        self._pipeline = pipeline
        self._slots = slots
        self.script = Script("fleet.lua")
        # "{fleet}": the fleet's keys share a slot of their own, touched once a second by
        # each replica, never by a request.
        base = f"{key_base}{{fleet}}:"
        self._keys = [f"{base}leases", f"{base}blocks", f"{base}wants"]
        self.replica_id = uuid.uuid4().hex
        self.fleet_cap = fleet_cap
        self.fallback = fallback
        self._metrics = metrics
        self._hold_ms = round((LEASE_SECONDS + hold_seconds) * 1000)
        self._valid_until = 0.0  # monotonic time the current lease ends
        self.granted = 0
        self.replicas = 0
        # Until the first lease answers this replica admits nothing (without Redis at all,
        # its fallback share): starting replicas never push the fleet past the cap.
        self._resize(fallback if pipeline is None else 0)

    async def renew(self, *, release: bool = False) -> bool:
        """One renewal (or, `release`, the block given back); True when Redis answered."""
        if self._pipeline is None:
            return False
        sent = time.monotonic()
        args: list[Any] = [
            self.replica_id,
            self._slots.cap,
            self._slots.held,
            self.fleet_cap,
            self._hold_ms,
            1 if release else 0,
        ]
        try:
            granted, replicas = await self._pipeline.call(self.script, self._keys, args)
        except _FAILURES as err:
            self.expire_if_due()
            log.debug("fleet lease not renewed: %s", type(err).__name__)
            return False
        if release:
            return True
        self.granted, self.replicas = int(granted), int(replicas)
        lapsed = not self.holds_lease
        self._valid_until = sent + LEASE_SECONDS
        self._resize(self.granted, until=self._valid_until)
        if lapsed and self.holds_lease:
            log.info("fleet lease renewed: this replica holds at most %d", self.granted)
        return True

    @property
    def holds_lease(self) -> bool:
        """Whether this replica may admit under a lease now (always without Redis)."""
        return self._pipeline is None or time.monotonic() < self._valid_until

    def expire_if_due(self) -> None:
        """Past the lease's end without a renewal: no slots (checked before every admission
        and after every failed renewal; the slots themselves end with the lease anyway)."""
        if self._valid_until and not self.holds_lease:
            log.warning(
                "fleet lease ended without renewal (Redis unreachable): this replica admits"
                " nothing until a renewal answers"
            )
            self._valid_until = 0.0
            self._resize(0)

    def _resize(self, capacity: int, until: float | None = None) -> None:
        self._slots.resize(capacity, until)
        self._metrics.replica_capacity_changed(self._slots.capacity)

    async def run(self) -> None:
        """Renew forever (cancel to stop)."""
        while True:
            await self.renew()
            await asyncio.sleep(RENEW_SECONDS)
