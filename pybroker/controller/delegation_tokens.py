"""Delegation tokens (KIP-48): Kafka's DelegationTokenControlManager (create, renew, expire, the expiry
sweep) and the broker's DelegationTokenManager (the token cache SCRAM authenticates against), in one.

Tokens are enabled by ``delegation.token.secret.key``; without it every request answers
DELEGATION_TOKEN_AUTH_DISABLED.  Tokens live in the metadata store (a single broker's document; in cluster
mode ZooKeeper's /delegation_token/tokens first, cluster_dynamic_state.py): this manager writes them there
and its cache follows every change the store reports, whichever broker made it.  Every broker computes a
token's HMAC from the shared secret, as Kafka's brokers do, so a token made on one authenticates on all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pybroker.config import BrokerConfig, random_kafka_uuid
from pybroker.metadata.store import MetadataStore
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.security.context import KafkaPrincipal
from pybroker.security.delegation_token import (
    DelegationTokenCache,
    TokenCredential,
    TokenInformation,
    create_hmac,
)
from pybroker.security.scram import ScramMechanism
from pybroker.storage.errors import KafkaStorageError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CreatedToken:
    token: TokenInformation
    hmac: bytes


class DelegationTokenManager:
    def __init__(
        self, config: BrokerConfig, store: MetadataStore, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)
    ) -> None:
        secret = config.get("delegation.token.secret.key")
        self.secret_key: str | None = str(secret) if secret else None
        self.max_lifetime_ms = int(config.get("delegation.token.max.lifetime.ms"))
        self.renew_lifetime_ms = int(config.get("delegation.token.expiry.time.ms"))
        self.expiry_check_interval_ms = int(config.get("delegation.token.expiry.check.interval.ms"))
        self.store = store
        self.cache = DelegationTokenCache()
        self.clock_ms = clock_ms
        store.delegation_token_listener = self._token_changed

    @property
    def enabled(self) -> bool:
        return self.secret_key is not None

    def load(self) -> None:
        """The cache from the store's tokens (after the store is loaded, or synced from ZooKeeper)."""
        for token_id in list(self.store.delegation_tokens):
            self._token_changed(token_id)

    def _token_changed(self, token_id: str) -> None:
        token = self.store.delegation_tokens.get(token_id)
        if token is None or self.secret_key is None:
            self.cache.remove(token_id)
        else:
            self.cache.update(token, create_hmac(self.secret_key, token_id))

    # -- DelegationTokenControlManager ------------------------------------------------------------------
    def create(
        self, requester: KafkaPrincipal, owner: KafkaPrincipal, renewers: list[KafkaPrincipal], max_lifetime_ms: int
    ) -> CreatedToken:
        """Raises KafkaError: DELEGATION_TOKEN_AUTH_DISABLED, INVALID_PRINCIPAL_TYPE, or a write failure."""
        if self.secret_key is None:
            raise KafkaError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        now = self.clock_ms()
        max_life = self.max_lifetime_ms if max_lifetime_ms <= 0 else min(self.max_lifetime_ms, max_lifetime_ms)
        max_timestamp = now + max_life
        expiry_timestamp = min(max_timestamp, now + self.renew_lifetime_ms)
        if any(r.principal_type != KafkaPrincipal.USER_TYPE for r in renewers):
            raise KafkaError(ErrorCode.INVALID_PRINCIPAL_TYPE)
        token_id = random_kafka_uuid()
        token = TokenInformation(token_id, owner, requester, tuple(renewers), now, max_timestamp, expiry_timestamp)
        self._write(lambda: self.store.set_delegation_token(token))
        log.info("created delegation token %s for owner %s (requested by %s)", token_id, owner, requester)
        return CreatedToken(token, self.cache.hmac(token_id))

    def _token_to_change(self, principal: KafkaPrincipal, hmac_bytes: bytes) -> TokenInformation:
        if self.secret_key is None:
            raise KafkaError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        token = self.cache.token_for_hmac(hmac_bytes)
        if token is None:
            raise KafkaError(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)
        if token.expired(self.clock_ms()):
            raise KafkaError(ErrorCode.DELEGATION_TOKEN_EXPIRED)
        if not token.may_renew(principal):
            raise KafkaError(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
        return token

    def renew(self, principal: KafkaPrincipal, hmac_bytes: bytes, renew_period_ms: int) -> int:
        """The new expiry timestamp; raises KafkaError as DelegationTokenControlManager answers."""
        token = self._token_to_change(principal, hmac_bytes)
        period = self.renew_lifetime_ms if renew_period_ms <= 0 else min(self.renew_lifetime_ms, renew_period_ms)
        expiry = min(token.max_timestamp, self.clock_ms() + period)
        self._write(lambda: self.store.set_delegation_token(token.with_expiry(expiry)))
        return expiry

    def expire(self, principal: KafkaPrincipal, hmac_bytes: bytes, expiry_period_ms: int) -> int:
        """A negative period removes the token at once (answered with that period, as Kafka's controller
        does); otherwise the token expires that much later (never past its max timestamp)."""
        token = self._token_to_change(principal, hmac_bytes)
        if expiry_period_ms < 0:
            self._write(lambda: self.store.remove_delegation_tokens([token.token_id]))
            log.info("delegation token %s of %s expired by %s", token.token_id, token.owner, principal)
            return expiry_period_ms
        expiry = min(token.max_timestamp, self.clock_ms() + expiry_period_ms)
        self._write(lambda: self.store.set_delegation_token(token.with_expiry(expiry)))
        return expiry

    def expire_tokens(self) -> None:
        """sweepExpiredDelegationTokens: remove every token past its expiry or max timestamp."""
        now = self.clock_ms()
        expired = [t for t in self.cache.tokens() if t.expired(now)]
        for token in expired:
            log.info("Delegation token expired for token: %s for owner: %s", token.token_id, token.owner)
        if expired:
            self._write(lambda: self.store.remove_delegation_tokens([t.token_id for t in expired]))

    @staticmethod
    def _write(change: Callable[[], None]) -> None:
        try:
            change()
        except KafkaStorageError as e:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, str(e)) from e

    # -- the broker's DelegationTokenManager -------------------------------------------------------------
    def tokens(self, eligible: Callable[[TokenInformation], bool]) -> list[tuple[TokenInformation, bytes]]:
        return [(t, self.cache.hmac(t.token_id)) for t in self.cache.tokens() if eligible(t)]

    def credential(self, token_id: str, mechanism: ScramMechanism) -> TokenCredential | None:
        """What SCRAM's tokenauth looks up (ScramServerCallbackHandler's DelegationTokenCredentialCallback)."""
        return self.cache.credential(token_id, mechanism) if self.enabled else None
