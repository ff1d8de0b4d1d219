"""Client quota configuration and enforcement.

``ClientQuotaEntity`` is a quota's key: ``{"user": "alice", "client-id": "app"}``, a ``None`` name
being the ``<default>`` of that type (Kafka's ClientQuotaEntity).  ``validate_alteration`` and
``describe`` follow Kafka's ClientQuotaControlManager / ClientQuotaImage (errors INVALID_REQUEST with
Kafka's messages).  ``ClientQuotaManager`` finds the quota that applies to a request as Kafka's
DefaultQuotaCallback does (user+client-id, user+default client, user, default user+client-id, default
user+default client, default user, client-id, default client-id: the first level that has the key),
keeps one ``SampledRate`` per matched entity (a user-level quota is shared by all of that user's
client ids) and says how long a request must be throttled (KIP-219)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping

from pybroker.quotas.rate import SampledRate, throttle_time_ms

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# QuotaConfig's keys and their types: LONG keys take whole numbers only.
USER_CLIENT_KEYS = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}
IP_KEYS = {CONNECTION_CREATION_RATE: "INT"}

# DescribeClientQuotas match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

# An entity as a hashable key: sorted (type, name-or-None) pairs.
EntityKey = tuple[tuple[str, str | None], ...]


class QuotaError(ValueError):
    """INVALID_REQUEST with Kafka's message."""


def entity_key(entity: Iterable[tuple[str, str | None]]) -> EntityKey:
    return tuple(sorted(entity))


def validate_entity(entity: list[tuple[str, str | None]]) -> EntityKey:
    """ClientQuotaControlManager.validateEntity."""
    if not entity:
        raise QuotaError("Invalid empty client quota entity")
    types = [t for t, _ in entity]
    for t in types:
        if t not in ENTITY_TYPES:
            raise QuotaError(f"Unhandled client quota entity type: {t}")
    if len(set(types)) != len(types):
        dup = next(t for t in types if types.count(t) > 1)
        raise QuotaError(f"Duplicate {dup} entity type in client quota entity")
    if IP in types and len(types) > 1:
        raise QuotaError("Invalid quota entity combination, IP entity should not be combined with User or ClientId")
    for t, name in entity:
        if t == IP and name is not None and not _valid_ip(name):
            raise QuotaError(f"{name} is not a valid IP or resolvable host.")
        if name is not None and name == "" and t != CLIENT_ID:
            raise QuotaError(f"Empty {t} entity name is not allowed")
    return entity_key(entity)


def _valid_ip(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def validate_op(key: str, value: float, remove: bool, ip_entity: bool) -> None:
    """ClientQuotaControlManager.validateQuotaKeyValue."""
    keys = IP_KEYS if ip_entity else USER_CLIENT_KEYS
    kind = keys.get(key)
    if kind is None:
        raise QuotaError(f"Invalid configuration key {key}")
    if remove:
        return
    if not math.isfinite(value) or value <= 0.0:
        raise QuotaError(f"Quota {key} must be greater than 0")
    if kind in ("LONG", "INT") and value != int(value):
        raise QuotaError(f"Integer value expected for {key}")
    if kind == "INT" and value > 2**31 - 1:
        raise QuotaError(f"Proposed value for {key} is too large for an INT")


def describe(
    quotas: Mapping[EntityKey, Mapping[str, float]], components: list[tuple[str, int, str | None]], strict: bool
) -> list[tuple[EntityKey, dict[str, float]]]:
    """ClientQuotaImage.describe: the entities matching every component (and, if strict, nothing else)."""
    seen: set[str] = set()
    for entity_type, match_type, match in components:
        if entity_type not in ENTITY_TYPES:
            raise QuotaError(f"Unknown entity type {entity_type}") if entity_type else QuotaError(
                "Invalid empty entity type in filter"
            )
        if entity_type in seen:
            raise QuotaError(f"Entity type {entity_type} cannot appear more than once in the filter.")
        seen.add(entity_type)
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise QuotaError(f"Unknown match type {match_type}")
        if match_type == MATCH_EXACT and match is None:
            raise QuotaError("Invalid null match for EXACT match type")
    if IP in seen and (USER in seen or CLIENT_ID in seen):
        raise QuotaError(
            "Invalid entity filter component combination, IP filter component should not be used with "
            "user or clientId filter component."
        )
    out = []
    for key, values in quotas.items():
        if not values:
            continue
        names = dict(key)
        if strict and set(names) != seen:
            continue
        ok = True
        for entity_type, match_type, match in components:
            if entity_type not in names:
                ok = False
            elif match_type == MATCH_EXACT:
                ok = names[entity_type] == match
            elif match_type == MATCH_DEFAULT:
                ok = names[entity_type] is None
            if not ok:
                break
        if ok:
            out.append((key, dict(values)))
    out.sort(key=lambda kv: [(t, n or "") for t, n in kv[0]])
    return out


class ClientQuotaManager:
    """Byte-rate, request and mutation quotas of the broker's clients (Kafka's ClientQuotaManager,
    ClientRequestQuotaManager and ControllerMutationQuotaManager share this one lookup)."""

    def __init__(self, quotas: Mapping[EntityKey, Mapping[str, float]], samples: int = 11, window_s: int = 1) -> None:
        self.quotas = quotas  # the metadata store's live dict: AlterClientQuotas applies at once
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = samples * window_s * 1000
        self._rates: dict[tuple[str, str, str], SampledRate] = {}

    def enabled(self) -> bool:
        return bool(self.quotas)

    def quota(self, quota_type: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """(bound, metric tags) by DefaultQuotaCallback's precedence, or None when none applies."""
        q = self.quotas
        levels = (
            (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
            (((CLIENT_ID, None), (USER, user)), (user, client_id)),
            (((USER, user),), (user, "")),
            (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
            (((CLIENT_ID, None), (USER, None)), (user, client_id)),
            (((USER, None),), (user, "")),
            (((CLIENT_ID, client_id),), ("", client_id)),
            (((CLIENT_ID, None),), ("", client_id)),
        )
        for key, tags in levels:
            values = q.get(key)
            if values is not None and quota_type in values:
                return values[quota_type], tags
        return None

    def unrecord(self, quota_type: str, user: str, client_id: str, value: float, now_ms: float | None = None) -> None:
        """ClientQuotaManager.unrecordQuotaSensor: take back bytes of a response not sent after all."""
        found = self.quota(quota_type, user, client_id)
        if found is not None:
            rate = self._rates.get((quota_type, *found[1]))
            if rate is not None:
                rate.unrecord(value, time.monotonic() * 1000.0 if now_ms is None else now_ms)

    def record_and_get_throttle_time_ms(
        self, quota_type: str, user: str, client_id: str, value: float, now_ms: float | None = None
    ) -> int:
        """ClientQuotaManager.recordAndGetThrottleTimeMs: record ``value`` against the entity's quota
        and return how long to throttle (0 within the quota or without one)."""
        if not self.quotas:
            return 0
        found = self.quota(quota_type, user, client_id)
        if found is None:
            return 0
        bound, tags = found
        now = time.monotonic() * 1000.0 if now_ms is None else now_ms
        rate = self._rates.get((quota_type, *tags))
        if rate is None:
            rate = self._rates[(quota_type, *tags)] = SampledRate(self.samples, self.window_ms)
        rate.record(value, now)
        return throttle_time_ms(rate, bound, now, self.max_throttle_ms)


THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


class ControllerMutationQuota:
    """One request's view of ``controller_mutation_rate`` (Kafka's ControllerMutationQuota): strict
    (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+) refuses a mutation while the rate is
    over the quota, permissive (older versions) only throttles; either way every partition created
    or deleted is recorded and the response carries the resulting throttle time."""

    __slots__ = ("manager", "user", "client_id", "strict", "throttle_ms")

    def __init__(self, manager: ClientQuotaManager, user: str, client_id: str, strict: bool) -> None:
        self.manager, self.user, self.client_id, self.strict = manager, user, client_id, strict
        self.throttle_ms = 0

    def exceeded(self) -> bool:
        """StrictControllerMutationQuota.checkThrottle: over the quota before this mutation."""
        if not self.strict or not self.manager.quotas:
            return False
        found = self.manager.quota(CONTROLLER_MUTATION_RATE, self.user, self.client_id)
        if found is None:
            return False
        rate = self.manager._rates.get((CONTROLLER_MUTATION_RATE, *found[1]))
        if rate is None:
            return False
        now = time.monotonic() * 1000.0
        ms = throttle_time_ms(rate, found[0], now, self.manager.max_throttle_ms)
        self.throttle_ms = max(self.throttle_ms, ms)
        return ms > 0

    def record(self, partitions: int) -> None:
        """Strict quotas record without checking (the next mutation is refused, Kafka's
        StrictControllerMutationQuota); permissive ones throttle the response that crossed it."""
        ms = self.manager.record_and_get_throttle_time_ms(
            CONTROLLER_MUTATION_RATE, self.user, self.client_id, partitions
        )
        if not self.strict:
            self.throttle_ms = max(self.throttle_ms, ms)
