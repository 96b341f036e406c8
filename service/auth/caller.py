"""The authenticated caller of one MCP request, as every tool sees it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from uuid import UUID

import msgspec

WORKSPACES_READ = "workspaces:read"
N8N_READ = "n8n:read"
ALL_SCOPES = (WORKSPACES_READ, N8N_READ)


class Caller(msgspec.Struct, frozen=True):
    """An account acting through one approval, with its eligible workspace set.

    `eligible` maps each eligible workspace (the approval's workspaces the account is still
    a member of, recomputed on every call) to the account's role in it.

    A caller is `confirmed` once its approval row was read in this request. An unconfirmed
    caller holds only what the verified token says (`Caller.pending`, made by the bearer
    check); service/auth/authorization.py confirms it, from a read of its own or from the
    row a tool's first statement read (`Tool.authorizes`). Until then it knows no
    workspace: `role_in` and `eligible_digest` must not be used.
    """

    account_id: UUID
    approval_id: UUID
    generation: int
    client_id: str
    scopes: frozenset[str]
    eligible: Mapping[UUID, str]
    confirmed: bool = True

    @classmethod
    def build(
        cls,
        *,
        account_id: UUID,
        approval_id: UUID,
        generation: int,
        client_id: str,
        scopes: frozenset[str],
        eligible: Mapping[UUID, str],
    ) -> Caller:
        return cls(account_id, approval_id, generation, client_id, scopes, dict(eligible))

    @classmethod
    def pending(
        cls,
        *,
        account_id: UUID,
        approval_id: UUID,
        generation: int,
        client_id: str,
        scopes: frozenset[str],
    ) -> Caller:
        """The caller a verified token names, before its approval row is read."""
        return cls(account_id, approval_id, generation, client_id, scopes, {}, False)

    @property
    def eligible_digest(self) -> bytes:
        """16 bytes naming the eligible set (a cursor is bound to it): computed when a
        cursor needs it, not for every confirmed caller (a refused request needs none)."""
        if not self.confirmed:
            raise RuntimeError("the approval of this caller was not read yet")
        return hashlib.sha256(b"".join(sorted(w.bytes for w in self.eligible))).digest()[:16]

    def role_in(self, workspace_id: UUID) -> str | None:
        if not self.confirmed:
            raise RuntimeError("the approval of this caller was not read yet")
        return self.eligible.get(workspace_id)
