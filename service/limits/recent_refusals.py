"""Who the shared limiter refused a moment ago: the hint that turns overlapped admission
off for a caller likely to be refused again.

An overlapped admission (admission.py, `begin`) lets a request's work run while admit.lua's
reply is on its way; when the reply refuses, that work is thrown away. A refusal says the
next request of the same approval (its rate), of the same account (its concurrency or its
daily budget) or of anyone (the global cap, or a limiter that did not answer) is likely to
be refused too, so for `HOLD_SECONDS` after one, those requests wait for their admission
before any work, as without overlap. The hint only changes how fast an answer comes, never
what it is; it is per process and forgets everything past `_KNOWN` entries.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from service.auth.caller import Caller
from service.limits.budget import ACCOUNT, ACCOUNT_DAILY, APPROVAL

HOLD_SECONDS = 1.0
_KNOWN = 4096
_EVERYONE = "global"


class RecentRefusals:
    def __init__(self, hold_seconds: float = HOLD_SECONDS) -> None:
        self._hold = hold_seconds
        self._until: dict[Hashable, float] = {}

    def remember(self, caller: Caller, limit: str | None) -> None:
        """The shared limiter refused `caller` by `limit` (None: it did not answer)."""
        if limit == APPROVAL:
            key: Hashable = caller.approval_id
        elif limit in (ACCOUNT, ACCOUNT_DAILY):
            key = caller.account_id
        else:
            key = _EVERYONE
        if len(self._until) >= _KNOWN:
            self._until.clear()
        self._until[key] = time.monotonic() + self._hold

    def refused(self, caller: Caller) -> bool:
        """Whether a refusal of this caller's approval, its account or everyone is recent."""
        until = self._until
        if not until:
            return False
        now = time.monotonic()
        for key in (_EVERYONE, caller.account_id, caller.approval_id):
            due = until.get(key)
            if due is not None:
                if now < due:
                    return True
                del until[key]
        return False
