"""The admission's script calls, packed once: the EVALSHA bytes of admit.lua and release.lua
for an (account, approval), with only the request id left to fill in.

`ScriptCalls` also names an admission's keys (all its account's: one hash tag per account),
knows the slot they hash to, for the pipeline to send the call to its owner, and reads
admit.lua's integer replies into a `Decision`. Why: docs/decisions/limits.md, "Packed once"
and "One slot per account".
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from redis.crc import key_slot

from service.limits.budget import ACCOUNT, ACCOUNT_DAILY, APPROVAL, Budget, Decision
from service.limits.pipeline import Script, evalsha
from service.settings.limits import Limits
from service.settings.redis import ONE_SLOT

# How many (account, approval) entries are remembered before starting over.
_KNOWN = 4096

# admit.lua's limit codes.
_LIMITS = {2: ACCOUNT, 3: APPROVAL, 4: ACCOUNT_DAILY}

ADMITTED, REFUSED, CANCELLED = 1, 0, -1


def _bulk(word: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(word), word)


def _head(script: Script, keys: Sequence[str], args: int) -> bytes:
    """The RESP array header, EVALSHA, the SHA1 and the keys: what precedes ARGV[1]."""
    sha = (script.sha or script.digest).encode()
    words = (b"EVALSHA", sha, b"%d" % len(keys), *(k.encode() for k in keys))
    return b"*%d\r\n" % (len(words) + args) + b"".join(_bulk(w) for w in words)


class _Packed:
    __slots__ = ("admit", "keys", "release", "slot")

    def __init__(self, keys: list[str], admit: bytes, release: bytes) -> None:
        self.keys = keys
        self.admit = admit
        self.release = release
        self.slot: int = key_slot(keys[0].encode())  # the Cluster slot of every key here


class ScriptCalls:
    """The packed calls of every (account, approval) seen lately.

    Every request of an approval names the same four keys and, for the admission, the same
    caps: only its request id differs. So the bytes before and after the request id are made
    once per (account, approval) and remembered (up to 4,096 pairs, then made anew), and a
    call costs two concatenations instead of packing thirteen arguments.
    """

    def __init__(self, prefix: str, limits: Limits, lease_ms: int, layout: str) -> None:
        self._prefix = prefix
        self._one_slot = layout == ONE_SLOT
        self.limits = limits
        self.lease_ms = lease_ms
        self.admit_script = Script("admit.lua")
        self.release_script = Script("release.lua")
        self._admit_args = (
            limits.account_concurrency,
            limits.approval_per_minute,
            lease_ms,
            limits.account_per_day or 0,
        )
        self._admit_tail = b"".join(_bulk(b"%d" % a) for a in self._admit_args)
        self._known: dict[tuple[UUID, UUID], _Packed] = {}

    def keys(self, account_id: UUID, approval_id: UUID) -> list[str]:
        """The four keys of an admission, all in the account's hash slot: the account's
        leases, the approval's bucket, the account's daily budget, the account's cancelled
        ids. A plain release names the first."""
        return self._packed(account_id, approval_id).keys

    def slot(self, account_id: UUID, approval_id: UUID) -> int:
        """The Cluster hash slot of the admission's keys (where the pipeline sends it)."""
        return self._packed(account_id, approval_id).slot

    def admit(self, request_id: str, account_id: UUID, approval_id: UUID) -> bytes:
        rid = request_id.encode()
        return self._packed(account_id, approval_id).admit + _bulk(rid) + self._admit_tail

    def release(self, request_id: str, account_id: UUID, approval_id: UUID) -> bytes:
        return self._packed(account_id, approval_id).release + _bulk(request_id.encode())

    def compensate(self, request_id: str, account_id: UUID, approval_id: UUID) -> bytes:
        """A compensating release (rare: packed in full)."""
        lim = self.limits
        args = (request_id, 1, self.lease_ms, lim.approval_per_minute, lim.account_per_day or 0)
        return evalsha(self.release_script, self.keys(account_id, approval_id), args)

    def decision(self, reply: Sequence[int]) -> Decision | None:
        """admit.lua's reply as a decision; None for an id its compensation cancelled."""
        status, limit, retry_ms, milli_tokens, used, reset_ms = reply
        if status == CANCELLED:
            return None
        lim = self.limits
        budget = Budget(
            lim.approval_per_minute, milli_tokens / 1000, lim.account_per_day, used, reset_ms / 1000
        )
        if status == ADMITTED:
            return Decision(True, budget)
        return Decision(False, budget, _LIMITS.get(limit, ACCOUNT), retry_ms)

    def _packed(self, account_id: UUID, approval_id: UUID) -> _Packed:
        known = self._known.get((account_id, approval_id))
        if known is not None:
            return known
        if self._one_slot:
            # "<prefix>{limits}:…": every key in one slot, named as before account slots.
            b = f"{self._prefix}{{limits}}:"
            keys = [
                f"{b}account:{account_id}",
                f"{b}approval:{approval_id}",
                f"{b}daily:{account_id}",
                f"{b}cancelled",
            ]
        else:
            # "<prefix>limits:{<account>}:…": the account id is the hash tag (unless the
            # prefix carries a tag of its own, which comes first and pins every key to it).
            b = f"{self._prefix}limits:{{{account_id}}}:"
            keys = [f"{b}account", f"{b}approval:{approval_id}", f"{b}daily", f"{b}cancelled"]
        packed = _Packed(
            keys,
            _head(self.admit_script, keys, 1 + len(self._admit_args)),
            _head(self.release_script, keys[:1], 1),
        )
        if len(self._known) >= _KNOWN:
            self._known.clear()
        self._known[(account_id, approval_id)] = packed
        return packed
