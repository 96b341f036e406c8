"""Signing keys: loading a PEM (Ed25519 → EdDSA, EC P-256 → ES256), its public JWK and its
kid, the RFC 7638 thumbprint of that JWK (served at /.well-known/jwks.json)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from service.crypto import b64url

PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A key that verifies tokens: its kid (the RFC 7638 thumbprint), alg and JWK."""

    kid: str
    alg: str
    public: PublicKey
    jwk: dict[str, str]


def public_jwk(public: PublicKey) -> tuple[str, dict[str, str]]:
    """(alg, the key's required JWK members) for an Ed25519 or P-256 public key."""
    if isinstance(public, ed25519.Ed25519PublicKey):
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return "EdDSA", {"crv": "Ed25519", "kty": "OKP", "x": b64url(raw)}
    if isinstance(public.curve, ec.SECP256R1):
        nums = public.public_numbers()
        return "ES256", {
            "crv": "P-256",
            "kty": "EC",
            "x": b64url(nums.x.to_bytes(32, "big")),
            "y": b64url(nums.y.to_bytes(32, "big")),
        }
    raise ValueError("signing keys must be Ed25519 or EC P-256")


def jwk_thumbprint(members: dict[str, str]) -> str:
    """RFC 7638: SHA-256 over the required members, sorted, without whitespace."""
    canonical = json.dumps(members, sort_keys=True, separators=(",", ":"))
    return b64url(hashlib.sha256(canonical.encode("utf-8")).digest())


def load_signing_key(pem: bytes) -> tuple[PrivateKey, SigningKey]:
    """The private key of a PEM (Ed25519 or EC P-256) and its verifying SigningKey."""
    private = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(private, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError("signing keys must be Ed25519 or EC P-256")
    public = private.public_key()
    alg, members = public_jwk(public)
    kid = jwk_thumbprint(members)
    return private, SigningKey(kid, alg, public, {**members, "kid": kid, "alg": alg, "use": "sig"})
