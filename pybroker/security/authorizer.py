"""An authorizer with Apache Kafka's StandardAuthorizer semantics (KIP-801), switched on by
``authorizer.class.name``.

A decision for (principal, host, operation, resource):
- a principal named in ``super.users`` may do anything;
- the ACLs that apply to the resource are its LITERAL ACLs, the LITERAL ``*`` ACLs of its type and
  the PREFIXED ACLs whose prefix starts its name; of those, the ones for the principal (or ``User:*``)
  from the host (or ``*``) with the operation (or ALL) decide: any DENY wins, else any ALLOW allows;
- ALLOW ACLs imply more than they name: READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS
  implies DESCRIBE_CONFIGS (DENY ACLs imply nothing);
- when no ACL at all applies to the resource (whoever it names), ``allow.everyone.if.no.acl.found``
  decides; when some apply but none matched, the answer is DENY.

ACLs are indexed by resource type, then LITERAL name / PREFIXED prefix (with the set of prefix lengths
in use), so a decision costs a few dict lookups, not a scan of every ACL; decisions are cached per
(principal, host, operation, resource) until the ACLs change.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from pybroker.security.acl import (
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    validate_new_acl,
)

log = logging.getLogger(__name__)
# Kafka's audit logger name: denials of requested resources are logged there (at DEBUG, see authorize).
audit_log = logging.getLogger("kafka.authorizer.logger")

# The values of authorizer.class.name that switch the authorizer on (KRaft's and ZooKeeper-era Kafka's).
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
AUTHORIZER_CLASS_NAMES = ("", STANDARD_AUTHORIZER, ACL_AUTHORIZER)

_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
_DECISION_CACHE_MAX = 100_000  # entries; the cache is emptied when it reaches this (bounded memory)


def parse_super_users(value: str | None) -> frozenset[str]:
    """Kafka's StandardAuthorizer.getConfiguredSuperUsers: ``;``-separated principals ``Type:name``."""
    users = set()
    for item in (value or "").split(";"):
        item = item.strip()
        if not item:
            continue
        if ":" not in item:
            raise ValueError(f"expected a string in format principalType:principalName but got {item}")
        users.add(item)
    return frozenset(users)


def _applies(acl: AclBinding, principal: str, host: str, op: AclOperation) -> AclPermissionType | None:
    """StandardAuthorizerData.findResult: ALLOW/DENY if ``acl`` matches the request, else None (the
    resource name is already known to match)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD_HOST and acl.host != host:
        return None
    acl_op = acl.operation
    if acl_op != AclOperation.ALL:
        if acl.permission_type == AclPermissionType.ALLOW:
            if op == AclOperation.DESCRIBE:
                if acl_op not in _IMPLIES_DESCRIBE:
                    return None
            elif op == AclOperation.DESCRIBE_CONFIGS:
                if acl_op not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif acl_op != op:
                return None
        elif acl_op != op:
            return None
    return acl.permission_type


@dataclass
class _TypeIndex:
    """The ACLs of one resource type."""

    literal: dict[str, list[AclBinding]] = field(default_factory=dict)  # includes the "*" wildcard
    prefixed: dict[str, list[AclBinding]] = field(default_factory=dict)
    prefix_lengths: list[int] = field(default_factory=list)  # sorted lengths of the prefixes in use

    def add(self, acl: AclBinding) -> None:
        table = self.literal if acl.pattern_type == PatternType.LITERAL else self.prefixed
        table.setdefault(acl.resource_name, []).append(acl)

    def done(self) -> None:
        self.prefix_lengths = sorted({len(p) for p in self.prefixed})

    def applicable(self, name: str) -> list[AclBinding]:
        """Every ACL whose pattern covers ``name``."""
        found: list[AclBinding] = []
        exact = self.literal.get(name)
        if exact:
            found.extend(exact)
        if name != WILDCARD_RESOURCE:
            wildcard = self.literal.get(WILDCARD_RESOURCE)
            if wildcard:
                found.extend(wildcard)
        if self.prefixed:
            n = len(name)
            prefixed = self.prefixed
            for length in self.prefix_lengths:
                if length > n:
                    break
                acls = prefixed.get(name[:length])
                if acls:
                    found.extend(acls)
        return found


class Authorizer:
    """ACLs in memory (indexed) and on disk (``store``: the metadata store's ``acls`` and ``set_acls``)."""

    def __init__(self, super_users: frozenset[str], allow_if_no_acl: bool, store=None) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._store = store
        self._acls: dict[uuid.UUID, AclBinding] = {}
        self._index: dict[ResourceType, _TypeIndex] = {}
        self._cache: dict[tuple, bool] = {}
        if store is not None:
            self._acls = dict(store.acls)
            self._rebuild()

    # -- decisions -----------------------------------------------------------------------------
    def authorize(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str, log_denied: bool = True
    ) -> bool:
        key = (principal, host, op, rtype, name)
        result = self._cache.get(key)
        if result is None:
            result = self._decide(principal, host, op, rtype, name)
            if len(self._cache) >= _DECISION_CACHE_MAX:
                self._cache.clear()
            self._cache[key] = result
        # DEBUG, not Kafka's INFO: a client retrying a refused request must not flood the broker's log.
        if not result and log_denied and audit_log.isEnabledFor(logging.DEBUG):
            audit_log.debug(
                "Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
                principal,
                op.name,
                host,
                rtype.name.title().replace("_", ""),
                name,
            )
        return result

    def _decide(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        index = self._index.get(rtype)
        acls = index.applicable(name) if index is not None else ()
        if not acls:
            return self.allow_if_no_acl
        allowed = False
        for acl in acls:
            result = _applies(acl, principal, host, op)
            if result == AclPermissionType.DENY:
                return False
            if result == AclPermissionType.ALLOW:
                allowed = True
        return allowed

    def authorize_by_resource_type(self, principal: str, host: str, op: AclOperation, rtype: ResourceType) -> bool:
        """Kafka's Authorizer.authorizeByResourceType: may the principal do ``op`` on at least one
        resource of the type (used by InitProducerId: IdempotentWrite, or Write on any topic)."""
        if self.authorize(principal, host, op, rtype, "hardcode", log_denied=False):
            return True
        deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        wildcard_allow = False
        for acl in self._acls.values():
            if acl.resource_type != rtype:
                continue
            if acl.host != host and acl.host != WILDCARD_HOST:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != op and acl.operation != AclOperation.ALL:
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD_RESOURCE:
                    return False
                deny[acl.pattern_type].add(acl.resource_name)
                continue
            if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD_RESOURCE:
                wildcard_allow = True
                continue
            allow[acl.pattern_type].add(acl.resource_name)
        if wildcard_allow:
            return True
        for ptype, names in allow.items():
            for allowed in names:
                if ptype == PatternType.LITERAL and allowed in deny[PatternType.LITERAL]:
                    continue
                if not any(allowed[:i] in deny[PatternType.PREFIXED] for i in range(1, len(allowed) + 1)):
                    return True
        return False

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """Kafka's AuthHelper.authorizedOperations: a bit per supported operation allowed."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[rtype]:
            if self.authorize(principal, host, op, rtype, name, log_denied=False):
                bits |= 1 << op
        return bits

    # -- ACL administration ---------------------------------------------------------------------
    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [acl for acl in self._acls.values() if acl_filter.matches(acl)]

    def create_acls(self, bindings: Iterable[AclBinding]) -> list[Exception | None]:
        """One result per binding (None: created or already there), written durably in one change."""
        results: list[Exception | None] = []
        existing = set(self._acls.values())
        added: dict[uuid.UUID, AclBinding] = {}
        for acl in bindings:
            try:
                validate_new_acl(acl)
            except ValueError as e:
                results.append(e)
                continue
            if acl not in existing:
                existing.add(acl)
                added[uuid.uuid4()] = acl
            results.append(None)
        if added:
            self._commit({**self._acls, **added})
        return results

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding] | Exception]:
        """Per filter the ACLs it deleted (or the error), all written durably in one change."""
        results: list[list[AclBinding] | Exception] = []
        doomed: set[uuid.UUID] = set()
        for f in filters:
            if f.is_unknown():
                results.append(ValueError("Unknown patternFilter." if _pattern_unknown(f) else "Unknown entryFilter."))
                continue
            matched = [(i, acl) for i, acl in self._acls.items() if f.matches(acl)]
            doomed.update(i for i, _ in matched)
            results.append([acl for _, acl in matched])
        if doomed:
            self._commit({i: acl for i, acl in self._acls.items() if i not in doomed})
        return results

    def reload(self) -> None:
        """The store's ACLs changed under this authorizer (cluster mode: another broker's change,
        applied from ZooKeeper): index them again."""
        if self._store is not None:
            self._acls = dict(self._store.acls)
            self._rebuild()

    def _commit(self, acls: dict[uuid.UUID, AclBinding]) -> None:
        """Write the new ACL set (raises KafkaStorageError from the store, changing nothing), then use it."""
        if self._store is not None:
            self._store.set_acls(acls)
        self._acls = acls
        self._rebuild()

    def _rebuild(self) -> None:
        index: dict[ResourceType, _TypeIndex] = {}
        for acl in self._acls.values():
            index.setdefault(acl.resource_type, _TypeIndex()).add(acl)
        for type_index in index.values():
            type_index.done()
        self._index = index
        self._cache = {}

    def __len__(self) -> int:
        return len(self._acls)


def _pattern_unknown(f: AclBindingFilter) -> bool:
    return f.resource_type == ResourceType.UNKNOWN or f.pattern_type == PatternType.UNKNOWN


def authorizer_from_config(config, store) -> Authorizer | None:
    """The broker's authorizer, or None when ``authorizer.class.name`` is empty."""
    if not config.get("authorizer.class.name"):
        return None
    authorizer = Authorizer(
        parse_super_users(config.get("super.users")), bool(config.get("allow.everyone.if.no.acl.found")), store
    )
    log.info(
        "authorizer on: super.users=%s, allow.everyone.if.no.acl.found=%s, %d acl(s)",
        ",".join(sorted(authorizer.super_users)),
        authorizer.allow_if_no_acl,
        len(authorizer),
    )
    return authorizer

