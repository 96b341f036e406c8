"""The authenticated caller of one MCP request, as every tool sees it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from uuid import UUID

WORKSPACES_READ = "workspaces:read"
N8N_READ = "n8n:read"
ALL_SCOPES = (WORKSPACES_READ, N8N_READ)


@dataclass(frozen=True, slots=True)
class Caller:
    """An account acting through one approval, with its eligible workspace set.

    `eligible` maps each eligible workspace (the approval's workspaces the account is still
    a member of, recomputed on every call) to the account's role in it.
    """

    account_id: UUID
    approval_id: UUID
    generation: int
    client_id: str
    scopes: frozenset[str]
    eligible: Mapping[UUID, str]
    eligible_digest: bytes = field(default=b"", compare=False)

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
        digest = hashlib.sha256(b"".join(sorted(w.bytes for w in eligible))).digest()[:16]
        return cls(account_id, approval_id, generation, client_id, scopes, dict(eligible), digest)

    def role_in(self, workspace_id: UUID) -> str | None:
        return self.eligible.get(workspace_id)
