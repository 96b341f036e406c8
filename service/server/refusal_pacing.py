"""Refusal pacing: how long a refusal's answer waits, by the run of refusals before it.

Past `pace_refusals_after` answers of status 400 or more in a row, each within a second of
the one before, every further one waits before it is written (10 ms, doubling up to
`longest_refusal_pause_seconds`); a 503 waits from the first one of a run. `RefusalPacing`
keeps a connection's run, `RefusalRuns` the runs by key; service/server/connections.py
applies them when it writes an answer. The rule and why: docs/decisions/floods.md,
"Refusal pacing".
"""

from __future__ import annotations

from collections import OrderedDict

from service.settings.limits import Connections

# Refusal pacing: the first pause, and how long after a refusal's answer the next request
# still continues the run of refusals (a client honouring Retry-After waits longer).
FIRST_PAUSE_SECONDS = 0.01
RUN_GAP_SECONDS = 1.0
# Pacing waits only while another connection was served within this long: with nobody
# else to serve (a replica alone with a fuzzer or a test suite) every refusal goes at once.
SERVED_WINDOW_SECONDS = 1.0


class RefusalPacing:
    """One connection's run of refusals, and the pause its next refusal waits."""

    __slots__ = ("_after", "_longest", "_run", "_last_end")

    def __init__(self, settings: Connections) -> None:
        self._after = settings.pace_refusals_after
        self._longest = settings.longest_refusal_pause_seconds
        self._run = 0
        self._last_end = float("-inf")

    def pause(self, status: int, now: float) -> float:
        """Seconds the answer of `status`, ready at `now`, waits before it is written."""
        if status < 400 or not self._after:
            self._run = 0
            return 0.0
        if now - self._last_end > RUN_GAP_SECONDS:
            self._run = 0
        self._run += 1
        # A 503 says "overloaded, retry shortly": a client that retries at once is paced
        # from the first one, so a shedding replica does not spend itself refusing.
        beyond = self._run - (0 if status == 503 else self._after)
        if beyond <= 0:
            return 0.0
        return min(FIRST_PAUSE_SECONDS * 2.0 ** min(beyond - 1, 30), self._longest)

    def answered(self, status: int, now: float) -> None:
        """A refusal's answer was written at `now`: the run's gap is counted from here."""
        if status >= 400:
            self._last_end = now


class RefusalRuns:
    """The runs of refusals by key (the answers the app tagged with `PACING_KEY`), for the
    most recently refused keys of this process (bounded).

    A key is an approval or a refused token, so a client that opens a new connection for
    each refused request is paced as well; behind a trusted proxy it is also the client's
    address, which there replaces the connection's run. A client looping on a refused
    request then sends a few a second, not thousands."""

    MAX_KEYS = 4096

    def __init__(self, settings: Connections) -> None:
        self._settings = settings
        self._runs: OrderedDict[object, RefusalPacing] = OrderedDict()

    def pause(self, key: object, status: int, now: float) -> float:
        run = self._runs.get(key)
        if run is None:
            if status < 400:
                return 0.0  # nothing to end: a key is remembered only once refused
            run = self._runs[key] = RefusalPacing(self._settings)
            if len(self._runs) > self.MAX_KEYS:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(key)
        return run.pause(status, now)

    def answered(self, key: object, status: int, now: float) -> None:
        run = self._runs.get(key)
        if run is not None:
            run.answered(status, now)
