"""The one authorization step of every MCP request (docs/decisions/auth.md, The bearer check).

The transport verifies the bearer token (service/auth/bearer.py): the caller it names is
*pending* until the approval behind the token is read in this request. `Authorization`
holds that caller and is the only place it becomes confirmed: `confirm()` reads the
approval on its own (one statement on the primary), `confirm_from(row)` takes the approval
columns a tool's own first statement read beside its rows (`Tool.authorizes`;
service/store/reads/executions.py): one round trip less. `ApprovalReads` are those reads.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import asyncpg

from service.auth.caller import Caller
from service.edge.waiters import waiting as queued
from service.errors import InsufficientScope, InvalidToken, Unavailable
from service.store.failures import STORE_FAILED
from service.store.reads.approvals import read_approval_state

ApprovalRead = Callable[[uuid.UUID], Awaitable[Mapping[str, Any] | None]]
UNAVAILABLE_MESSAGE = "Authorization is temporarily unavailable; retry shortly"


class Authorization:
    """The caller of one request: pending until confirmed, then confirmed for good.

    Both ways of confirming apply the same rules: the approval must exist, be neither
    revoked nor expired, be of the token's generation and belong to its account and client
    (else 401); the caller holds the scopes both the token and the approval grant, and
    `require`d scopes are checked against them (else 403). Dispatch confirms every caller
    still pending before any answer leaves, so a revoked approval is 401 whatever else is
    wrong with the request."""

    __slots__ = ("_caller", "_read", "_refusal", "_required")

    def __init__(self, caller: Caller, read: ApprovalRead | None = None) -> None:
        self._caller = caller
        self._read = read
        self._required: tuple[str, str] | None = None  # (tool, scope)
        self._refusal: InvalidToken | None = None  # the approval was read and refused

    @property
    def caller(self) -> Caller:
        """The confirmed caller, or the pending one (its ids and token scopes only)."""
        return self._caller

    @property
    def confirmed(self) -> bool:
        return self._caller.confirmed

    @property
    def decided(self) -> bool:
        """Whether the approval was read in this request (confirmed, or refused)."""
        return self._caller.confirmed or self._refusal is not None

    def require(self, tool: str, scope: str) -> None:
        """403 unless the caller holds `scope` (the token's scopes while pending: they
        bound the approval's); remembered and checked again once confirmed."""
        self._required = (tool, scope)
        self._check_scope()

    async def confirm(self) -> Caller:
        """Read the approval on its own unless already read (AuthError, Unavailable); once
        read, raise again what reading it raised (401, or 403 for a required scope)."""
        if self._caller.confirmed:
            self._check_scope()
            return self._caller
        if self._refusal is not None:
            raise self._refusal
        if self._read is None:
            raise RuntimeError("this authorization cannot read approvals")
        return self.confirm_from(await self._read(self._caller.approval_id))

    def confirm_from(self, row: Mapping[str, Any] | None) -> Caller:
        """Confirm a pending caller from `approval_state` columns (None: no such approval)."""
        if not self._caller.confirmed:
            try:
                self._caller = _confirmed(self._caller, row)
            except InvalidToken as err:
                self._refusal = err
                raise
            self._check_scope()
        return self._caller

    def _check_scope(self) -> None:
        if self._required is not None and self._required[1] not in self._caller.scopes:
            raise missing_scope(*self._required)


def missing_scope(tool: str, scope: str) -> InsufficientScope:
    return InsufficientScope(
        f"The {tool} tool needs the {scope} scope, which this approval lacks.",
        required_scope=scope,
    )


class DependencyTimer(Protocol):
    def db_call(self, operation: str, seconds: float, error: bool) -> None: ...


class ApprovalReads:
    """Reads approval states from the primary's pool (never a replica's: a revocation holds
    at once) within `timeout` seconds, timed as the `auth` dependency call.

    Concurrent requests of one approval share reads: while a read of an approval is in
    flight, every request of that approval that arrives waits for the NEXT read, which
    starts after the current one ends and answers all of them. Each answer therefore comes
    from a read that began after its request arrived (a revocation committed before a
    request is seen by it), and an approval flooding one replica costs one read at a time
    instead of one a request. A request waiting behind another's read is a waiter, not in
    flight, for load shedding (service/edge/waiters.py)."""

    def __init__(
        self, pool: Callable[[], asyncpg.Pool], timer: DependencyTimer, timeout: float
    ) -> None:
        self._pool = pool
        self._timer = timer
        self._timeout = timeout
        # The requests of each approval waiting for its next read, one future each: a
        # request that goes away (a client that disconnects, its handler cancelled) cancels
        # only its own, and leaves the read to the others.
        self._next: dict[uuid.UUID, list[asyncio.Future[Mapping[str, Any] | None]]] = {}
        self._reading: set[uuid.UUID] = set()

    async def read(self, approval_id: uuid.UUID) -> Mapping[str, Any] | None:
        loop = asyncio.get_running_loop()
        mine: asyncio.Future[Mapping[str, Any] | None] = loop.create_future()
        waiting = self._next.get(approval_id)
        if waiting is None:
            waiting = self._next[approval_id] = []
            if approval_id not in self._reading:
                self._reading.add(approval_id)
                loop.create_task(self._read_while_waited(approval_id))
                waiting.append(mine)
                return await mine  # its own read: in flight
        waiting.append(mine)
        with queued():  # behind another request's read, holding nothing: a waiter
            return await mine

    async def _read_while_waited(self, approval_id: uuid.UUID) -> None:
        waiting: list[asyncio.Future[Mapping[str, Any] | None]] = []
        try:
            while (batch := self._next.pop(approval_id, None)) is not None:
                waiting = batch
                try:
                    row = await self._read_once(approval_id)
                except Exception as err:
                    _settle(waiting, None, err)
                else:
                    _settle(waiting, row, None)
                waiting = []
        finally:
            self._reading.discard(approval_id)
            for each in waiting:  # the read itself was cancelled (the app stops)
                each.cancel()

    async def _read_once(self, approval_id: uuid.UUID) -> Mapping[str, Any] | None:
        started = time.perf_counter()
        failed = True
        try:
            async with asyncio.timeout(self._timeout):
                row = await read_approval_state(self._pool(), approval_id)
            failed = False
            return row
        except STORE_FAILED as err:
            raise Unavailable(UNAVAILABLE_MESSAGE, retry_after_seconds=1) from err
        finally:
            self._timer.db_call("auth", time.perf_counter() - started, failed)


def _settle(
    waiting: list[asyncio.Future[Mapping[str, Any] | None]],
    row: Mapping[str, Any] | None,
    error: Exception | None,
) -> None:
    """Give one read's row, or its failure, to every request still waiting for it."""
    for each in waiting:
        if each.done():  # a waiter that went away cancelled its own future
            continue
        if error is None:
            each.set_result(row)
        else:
            each.set_exception(error)


def _refused(description: str, reason: str) -> InvalidToken:
    return InvalidToken(description, reason=reason)


def _confirmed(pending: Caller, row: Mapping[str, Any] | None) -> Caller:
    if row is None or row["generation"] is None:
        raise _refused("The approval behind this token no longer exists", "revoked")
    if row["revoked"]:
        raise _refused("The approval behind this token was revoked", "revoked")
    if row["generation"] != pending.generation:
        raise _refused(
            "The approval behind this token was replaced; use its newer tokens", "revoked"
        )
    if row["expired"]:
        raise _refused("The approval behind this token has expired", "approval_expired")
    if row["account_id"] != pending.account_id or row["client_id"] != pending.client_id:
        raise _refused("The access token does not match its approval", "other")
    eligible: dict[uuid.UUID, str] = dict(zip(row["workspace_ids"], row["roles"], strict=True))
    return Caller.build(
        account_id=pending.account_id,
        approval_id=pending.approval_id,
        generation=pending.generation,
        client_id=pending.client_id,
        # A token never grants more than its approval holds now.
        scopes=pending.scopes & frozenset(row["scopes"]),
        eligible=eligible,
    )
