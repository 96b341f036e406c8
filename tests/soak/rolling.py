"""The soak's rolling-restart mode (`make soak SOAK_ARGS=--rolling`): the replicas behind
HAProxy with the shipped deploy/haproxy.cfg, restarted one at a time while the soak runs.

Every `every` seconds the next replica gets SIGTERM, drains, exits and is started again on
the same port (tests/support/rolling.py); the next roll waits until HAProxy marked it UP.
The samples of the soak (RSS, descriptors) are not taken while a replica is down: `quiet`
is held for the whole roll.
"""

from __future__ import annotations

import asyncio
import contextlib

from tests.hostile.processes import Replicas
from tests.support.haproxy import OwnHAProxy
from tests.support.rolling import Timeline, roll

ROLL_EVERY_SECONDS = 20.0


class Roller:
    """Rolls the replicas behind `lb` in turn until stopped."""

    def __init__(
        self, replicas: Replicas, lb: OwnHAProxy, every: float = ROLL_EVERY_SECONDS
    ) -> None:
        self.replicas, self.lb, self.every = replicas, lb, every
        self.timelines: list[Timeline] = []
        self.errors: list[str] = []
        self.quiet = asyncio.Lock()  # held while a replica is restarting
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        i = 0
        while True:
            await asyncio.sleep(self.every)
            async with self.quiet:
                try:
                    timeline = await roll(self.replicas, i, self.lb)
                except (RuntimeError, TimeoutError) as err:
                    self.errors.append(f"replica {i}: {err}")
                    return
            self.timelines.append(timeline)
            print(f"  rolled replica {i}:", flush=True)
            print("\n".join(timeline.lines()), flush=True)
            i = (i + 1) % len(self.replicas.ports)

    def report(self) -> bool:
        """Print the rolls; whether every roll completed in the right order."""
        print(f"rolling restarts: {len(self.timelines)}")
        ok = not self.errors and bool(self.timelines)
        for err in self.errors:
            print("  roll failed:", err)
        for t in self.timelines:
            ordered = 0 <= t.readiness_down < t.marked_down < t.listener_closed <= t.exited
            if not ordered or t.exit_code != 0:
                print(f"  replica {t.replica}: out of order or exit status {t.exit_code}")
                print("\n".join(t.lines()))
                ok = False
        return ok
