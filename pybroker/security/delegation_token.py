"""Delegation tokens (KIP-48, KIP-373) as Kafka keeps them: ``TokenInformation`` (the token's id, owner,
requester, renewers and timestamps), its HMAC and the SCRAM credentials a client authenticates with.

- The HMAC is HmacSHA512 of the token id (UTF-8) keyed by ``delegation.token.secret.key`` (UTF-8), as
  Kafka's DelegationTokenManager / DelegationTokenControlManager compute it; it is never stored: every
  broker of a cluster computes it from the shared secret.
- A client authenticates through SCRAM with the ``tokenauth=true`` extension, username = the token id,
  password = the base64 HMAC; the broker's credentials for it are derived from that password with the
  mechanism's minimum iteration count (DelegationTokenManager.prepareScramCredentials, 4096).
- ``DelegationTokenCache`` is Kafka's class of that name: the tokens, their HMACs (base64, to find a token
  from the HMAC a renew or expire request carries) and their SCRAM credentials per mechanism.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass, replace
from urllib.parse import quote, unquote

from pybroker.security.context import KafkaPrincipal
from pybroker.security.scram import ScramCredential, ScramMechanism

# DelegationTokenManagerZk.CurrentVersion: the version of a token's JSON in ZooKeeper.
ZK_TOKEN_VERSION = 3
SALT_BYTES = 32  # a random salt per credential (ScramFormatter.secureRandomBytes)


def create_hmac(secret_key: str, token_id: str) -> bytes:
    return hmac.new(secret_key.encode(), token_id.encode(), hashlib.sha512).digest()


def _sanitize(text: str) -> str:
    """Kafka's Sanitizer.sanitize (URL encoding) of a principal in the ZooKeeper JSON."""
    return quote(text, safe="")


@dataclass(frozen=True, slots=True)
class TokenInformation:
    token_id: str
    owner: KafkaPrincipal
    token_requester: KafkaPrincipal
    renewers: tuple[KafkaPrincipal, ...]
    issue_timestamp: int
    max_timestamp: int
    expiry_timestamp: int

    def owner_or_renewer(self, principal: KafkaPrincipal) -> bool:
        """TokenInformation.ownerOrRenewer (KIP-373: the requester too): who may describe the token."""
        return principal in (self.owner, self.token_requester) or principal in self.renewers

    def may_renew(self, principal: KafkaPrincipal) -> bool:
        """DelegationTokenControlManager.allowedToRenew: the owner or a renewer (not the requester)."""
        return principal == self.owner or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        return self.max_timestamp < now_ms or self.expiry_timestamp < now_ms

    def with_expiry(self, expiry_timestamp: int) -> TokenInformation:
        return replace(self, expiry_timestamp=expiry_timestamp)

    def to_json(self) -> dict:
        """DelegationTokenManagerZk.toJsonCompatibleMap: the znode /delegation_token/tokens/<id> and the
        single broker's metadata document alike."""
        return {
            "version": ZK_TOKEN_VERSION,
            "owner": _sanitize(str(self.owner)),
            "tokenRequester": _sanitize(str(self.token_requester)),
            "renewers": [_sanitize(str(r)) for r in self.renewers],
            "issueTimestamp": self.issue_timestamp,
            "maxTimestamp": self.max_timestamp,
            "expiryTimestamp": self.expiry_timestamp,
            "tokenId": self.token_id,
        }

    @classmethod
    def from_json(cls, d: dict) -> TokenInformation:
        owner = KafkaPrincipal.parse(unquote(d["owner"]))
        # Version 1 and 2 (before KIP-373) have no requester: the owner asked for the token.
        requester = KafkaPrincipal.parse(unquote(d["tokenRequester"])) if "tokenRequester" in d else owner
        return cls(
            str(d["tokenId"]),
            owner,
            requester,
            tuple(KafkaPrincipal.parse(unquote(r)) for r in d.get("renewers", [])),
            int(d["issueTimestamp"]),
            int(d["maxTimestamp"]),
            int(d["expiryTimestamp"]),
        )


@dataclass(frozen=True, slots=True)
class TokenCredential:
    """What SCRAM token authentication needs: the credential, who the client then is, and until when."""

    credential: ScramCredential
    owner: KafkaPrincipal
    expiry_timestamp: int


class DelegationTokenCache:
    def __init__(self) -> None:
        self._tokens: dict[str, TokenInformation] = {}
        self._hmacs: dict[str, bytes] = {}  # token id -> HMAC
        self._by_hmac: dict[str, str] = {}  # base64 HMAC -> token id
        self._credentials: dict[str, dict[ScramMechanism, ScramCredential]] = {}

    def update(self, token: TokenInformation, hmac_bytes: bytes) -> None:
        old = self._hmacs.get(token.token_id)
        self._tokens[token.token_id] = token
        if old == hmac_bytes:
            return  # a renewal: the same credentials
        password = base64.b64encode(hmac_bytes).decode()
        self._hmacs[token.token_id] = hmac_bytes
        self._by_hmac[password] = token.token_id
        self._credentials[token.token_id] = {
            m: ScramCredential.from_password(m, password, os.urandom(SALT_BYTES), m.min_iterations)
            for m in ScramMechanism
        }

    def remove(self, token_id: str) -> None:
        self._tokens.pop(token_id, None)
        self._credentials.pop(token_id, None)
        hmac_bytes = self._hmacs.pop(token_id, None)
        if hmac_bytes is not None:
            self._by_hmac.pop(base64.b64encode(hmac_bytes).decode(), None)

    def token(self, token_id: str) -> TokenInformation | None:
        return self._tokens.get(token_id)

    def token_for_hmac(self, hmac_bytes: bytes) -> TokenInformation | None:
        token_id = self._by_hmac.get(base64.b64encode(hmac_bytes).decode())
        return None if token_id is None else self._tokens.get(token_id)

    def hmac(self, token_id: str) -> bytes:
        return self._hmacs[token_id]

    def tokens(self) -> list[TokenInformation]:
        return list(self._tokens.values())

    def credential(self, token_id: str, mechanism: ScramMechanism) -> TokenCredential | None:
        token = self._tokens.get(token_id)
        if token is None:
            return None
        return TokenCredential(self._credentials[token_id][mechanism], token.owner, token.expiry_timestamp)
