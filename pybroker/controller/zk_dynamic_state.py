"""Cluster-wide entity configs and ACLs in ZooKeeper, in Kafka's ZK-mode layout.

What one broker is told to change (AlterUserScramCredentials, AlterClientQuotas, a dynamic broker
config, CreateAcls / DeleteAcls) holds on every broker of the cluster:

- entity configs (Kafka's ``AdminZkClient.changeConfigs``): ``/config/<entity path>`` holds
  ``{"version": 1, "config": {key: value}}`` for the entity paths ``users/<user>``,
  ``clients/<client id>``, ``users/<user>/clients/<client id>``, ``ips/<ip>`` and
  ``brokers/<broker id>`` (``<default>`` for the default entity); SCRAM credentials are the
  ``SCRAM-SHA-256`` / ``SCRAM-SHA-512`` keys of a user, in ScramCredentialUtils' format
  (``salt=…,stored_key=…,server_key=…,iterations=…``). Every change is followed by a sequential
  ``/config/changes/config_change_<n>`` holding ``{"version": 2, "entity_path": …}``.
- delegation tokens (Kafka's ZK-mode DelegationTokenManagerZk): ``/delegation_token/tokens/<token id>``
  holds the token's JSON (TokenInformation without its HMAC, which every broker computes from the shared
  secret); a change or removal is announced by ``/delegation_token/token_changes/token_change_<n>``
  holding the token id.
- ACLs (Kafka's ``ZkAclStore``): ``/kafka-acl/<ResourceType>/<name>`` for LITERAL patterns and
  ``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` for PREFIXED ones hold
  ``{"version": 1, "acls": [{"principal", "permissionType", "operation", "host"}]}``; a change is
  announced by ``/kafka-acl-changes/acl_changes_<n>`` (``Topic:name``) or
  ``/kafka-acl-extended-changes/acl_changes_<n>`` (JSON).

Writes are read-modify-write with the znode's version (a concurrent writer on another broker makes
the write retry on the newer content, so neither change is lost); readers (``ZkDynamicStateWatcher``)
load everything once and then follow the change notifications (Kafka's
ZkNodeChangeNotificationListener), deleting notifications older than 15 minutes.  Names in paths
are URL-encoded (Kafka's Sanitizer; ACL resource names too, as group ids may hold ``/``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, unquote

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from pybroker.controller.zk_client import KafkaZkClient

log = logging.getLogger(__name__)

CONFIG_PATH = "/config"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ACL_PATH = "/kafka-acl"
ACL_PREFIXED_PATH = "/kafka-acl-extended/prefixed"
ACL_CHANGES_PATH = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
TOKENS_PATH = "/delegation_token/tokens"
TOKEN_CHANGES_PATH = "/delegation_token/token_changes"
TOKEN_CHANGE_PREFIX = "token_change_"
# Kafka's ZkNodeChangeNotificationListener.changeExpirationMs.
NOTIFICATION_EXPIRY_S = 15 * 60
DEFAULT_ENTITY = "<default>"
# The entity types of /config other than topics (topic configs have their own watch).
ENTITY_TYPES = ("users", "clients", "ips", "brokers", "groups")
LITERAL, PREFIXED = "LITERAL", "PREFIXED"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: URL encoding, so any name is one path element."""
    return quote(name, safe="")


def desanitize(name: str) -> str:
    return unquote(name)


@dataclass(frozen=True)
class AclResource:
    """A resource pattern: Kafka's resource type name (``Topic``), LITERAL or PREFIXED, the name."""

    resource_type: str
    pattern_type: str
    name: str

    @property
    def path(self) -> str:
        base = ACL_PATH if self.pattern_type == LITERAL else ACL_PREFIXED_PATH
        return f"{base}/{self.resource_type}/{sanitize(self.name)}"


# An access control entry: (principal, host, operation name, permission type name), Kafka's JSON names.
Ace = tuple[str, str, str, str]


class DynamicStateListener(Protocol):
    """Told on the broker's event loop; an empty config / ACE set means the entity or resource is gone."""

    def on_entity_config(self, entity_path: str, config: dict[str, str]) -> None: ...

    def on_acls(self, changed: Mapping[AclResource, frozenset[Ace]]) -> None:
        """The ACEs now on each changed resource: one CreateAcls/DeleteAcls's changes arrive together."""

    def on_delegation_token(self, token_id: str, token: dict[str, Any] | None) -> None:
        """The token's JSON, or None when it was removed."""


def _encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _decode_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    return {k: str(v) for k, v in json.loads(data).get("config", {}).items()}


def _decode_acls(data: bytes | None) -> frozenset[Ace]:
    if not data:
        return frozenset()
    return frozenset(
        (a["principal"], a["host"], a["operation"], a["permissionType"]) for a in json.loads(data).get("acls", [])
    )


def _acls_doc(aces: Iterable[Ace]) -> dict[str, Any]:
    return {
        "version": 1,
        "acls": [
            {"principal": p, "host": h, "operation": o, "permissionType": t} for p, h, o, t in sorted(aces)
        ],
    }


class ZkDynamicState:
    """The writes (blocking kazoo calls: the caller's thread waits for ZooKeeper) and the full read."""

    def __init__(self, zk: KafkaZkClient) -> None:
        self.zk = zk

    # -- writes ------------------------------------------------------------------------------------
    def change_entity_config(self, entity_path: str, changes: Mapping[str, str | None]) -> None:
        """Set (or, for None, remove) keys of one entity's config, merged with what is there now."""
        path = f"{CONFIG_PATH}/{entity_path}"

        def merge(current: bytes | None) -> bytes | None:
            config = _decode_config(current)
            for key, value in changes.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = value
            return _encode({"version": 1, "config": config})

        self._read_modify_write(path, merge)
        self._notify(CONFIG_CHANGES_PATH, CONFIG_CHANGE_PREFIX, _encode({"version": 2, "entity_path": entity_path}))

    def change_acls(self, changes: Mapping[AclResource, tuple[Iterable[Ace], Iterable[Ace]]]) -> None:
        """Add and remove ACEs (``resource -> (added, removed)``) of one CreateAcls or DeleteAcls: every
        resource's znode written first, then the change notifications (one a resource, Kafka's ZK
        format) created in one ZooKeeper transaction, so each broker's watch sees them together and
        applies them as one change. Kafka 4.x (KRaft) writes one request's ACL records as one atomic
        batch and a broker applies the batch at once: a client never sees part of the request applied.
        (LITERAL and PREFIXED changes are announced in two directories, so a request with both still
        arrives as two changes.)"""
        notes: list[tuple[str, bytes]] = []
        for resource, (added_aces, removed_aces) in changes.items():
            added, removed = set(added_aces), set(removed_aces)

            def merge(current: bytes | None, added: set[Ace] = added, removed: set[Ace] = removed) -> bytes | None:
                aces = (set(_decode_acls(current)) - removed) | added
                return _encode(_acls_doc(aces)) if aces else None  # Kafka deletes an empty resource's znode

            self._read_modify_write(resource.path, merge)
            if resource.pattern_type == LITERAL:
                notes.append((ACL_CHANGES_PATH, f"{resource.resource_type}:{resource.name}".encode()))
            else:
                doc = {"version": 1, "resourceType": resource.resource_type, "name": resource.name,
                       "patternType": resource.pattern_type}  # fmt: skip
                notes.append((ACL_EXTENDED_CHANGES_PATH, _encode(doc)))
        if notes:
            self._notify_together(ACL_CHANGE_PREFIX, notes)

    def set_delegation_token(self, token_id: str, token: dict[str, Any]) -> None:
        path = f"{TOKENS_PATH}/{token_id}"
        self._read_modify_write(path, lambda _current: _encode(token))
        self._notify(TOKEN_CHANGES_PATH, TOKEN_CHANGE_PREFIX, token_id.encode())

    def remove_delegation_token(self, token_id: str) -> None:
        self._read_modify_write(f"{TOKENS_PATH}/{token_id}", lambda _current: None)
        self._notify(TOKEN_CHANGES_PATH, TOKEN_CHANGE_PREFIX, token_id.encode())

    def _read_modify_write(self, path: str, merge: Callable[[bytes | None], bytes | None]) -> None:
        kazoo = self.zk.kazoo
        while True:
            try:
                current, stat = self.zk.call(kazoo.get, path)
            except NoNodeError:
                new = merge(None)
                if new is None:
                    return
                try:
                    self.zk.call(kazoo.create, path, new, makepath=True)
                    return
                except NodeExistsError:
                    continue  # another broker created it meanwhile: merge into theirs
            new = merge(current)
            try:
                if new is None:
                    self.zk.call(kazoo.delete, path, version=stat.version)
                else:
                    self.zk.call(kazoo.set, path, new, version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue  # changed meanwhile: merge again

    def _notify(self, directory: str, prefix: str, data: bytes) -> None:
        self.zk.call(self.zk.kazoo.create, f"{directory}/{prefix}", data, sequence=True, makepath=True)

    def _notify_together(self, prefix: str, notes: list[tuple[str, bytes]]) -> None:
        """Sequential notifications ``(directory, data)`` made in one ZooKeeper transaction (all or none;
        a watch of a directory then fires once for all of its new children)."""
        kazoo = self.zk.kazoo
        for directory in {d for d, _ in notes}:
            self.zk.call(kazoo.ensure_path, directory)  # a transaction cannot make parents

        def commit() -> None:
            transaction = kazoo.transaction()
            for directory, data in notes:
                transaction.create(f"{directory}/{prefix}", data, sequence=True)
            failed = [r for r in transaction.commit() if isinstance(r, Exception)]
            if failed:
                raise failed[0]

        self.zk.call(commit)

    # -- reads -------------------------------------------------------------------------------------
    def entity_config(self, entity_path: str) -> dict[str, str]:
        try:
            data, _ = self.zk.call(self.zk.kazoo.get, f"{CONFIG_PATH}/{entity_path}")
        except NoNodeError:
            return {}
        return _decode_config(data)

    def acls_of(self, resource: AclResource) -> frozenset[Ace]:
        try:
            data, _ = self.zk.call(self.zk.kazoo.get, resource.path)
        except NoNodeError:
            return frozenset()
        return _decode_acls(data)

    def _children(self, path: str) -> list[str]:
        try:
            return list(self.zk.call(self.zk.kazoo.get_children, path))
        except NoNodeError:
            return []

    def entity_paths(self) -> list[str]:
        paths = []
        for entity_type in ENTITY_TYPES:
            for name in self._children(f"{CONFIG_PATH}/{entity_type}"):
                paths.append(f"{entity_type}/{name}")
                if entity_type == "users":
                    paths.extend(f"users/{name}/clients/{c}" for c in self._children(f"{CONFIG_PATH}/users/{name}/clients"))
        return paths

    def acl_resources(self) -> list[AclResource]:
        found = []
        for base, pattern in ((ACL_PATH, LITERAL), (ACL_PREFIXED_PATH, PREFIXED)):
            for resource_type in self._children(base):
                for name in self._children(f"{base}/{resource_type}"):
                    found.append(AclResource(resource_type, pattern, desanitize(name)))
        return found

    def delegation_token(self, token_id: str) -> dict[str, Any] | None:
        try:
            data, _ = self.zk.call(self.zk.kazoo.get, f"{TOKENS_PATH}/{token_id}")
        except NoNodeError:
            return None
        return json.loads(data) if data else None

    def delegation_tokens(self) -> dict[str, dict[str, Any]]:
        return {i: t for i in self._children(TOKENS_PATH) if (t := self.delegation_token(i)) is not None}

    def read_all(self) -> tuple[dict[str, dict[str, str]], dict[AclResource, frozenset[Ace]]]:
        configs = {p: c for p in self.entity_paths() if (c := self.entity_config(p))}
        acls = {r: a for r in self.acl_resources() if (a := self.acls_of(r))}
        return configs, acls


class ZkDynamicStateWatcher:
    """Follows the change notifications and delivers the changed entities and resources on ``loop``."""

    def __init__(self, state: ZkDynamicState, listener: DynamicStateListener) -> None:
        self.state = state
        self.listener = listener
        self._seen: dict[str, set[str]] = {
            CONFIG_CHANGES_PATH: set(), ACL_CHANGES_PATH: set(), ACL_EXTENDED_CHANGES_PATH: set(),
            TOKEN_CHANGES_PATH: set(),
        }  # fmt: skip
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False

    def mark_seen(self) -> None:
        """Notifications there now are covered by a full read done after this call."""
        for path, seen in self._seen.items():
            seen.update(self.state._children(path))

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, self._start_watches)

    def stop(self) -> None:
        self._stopped = True

    def _start_watches(self) -> None:
        kazoo = self.state.zk.kazoo
        for path in self._seen:
            self.state.zk.call(kazoo.ensure_path, path)
            ChildrenWatch(kazoo, path, self._on_notifications(path))

    def _on_notifications(self, path: str) -> Callable[[list[str]], bool | None]:
        def on_children(children: list[str]) -> bool | None:
            if self._stopped:
                return False
            with self._lock:
                new = sorted(c for c in children if c not in self._seen[path])
                self._seen[path].update(new)
                self._seen[path].intersection_update(children)
            acls: dict[AclResource, frozenset[Ace]] = {}
            for name in new:
                try:
                    self._process(path, name, acls)
                except NoNodeError:
                    pass  # purged by another broker: the entity was read by a later notification or at start
                except Exception:  # noqa: BLE001 - one bad notification must not stop the others
                    log.exception("could not process %s/%s", path, name)
            if acls:  # the ACL changes seen together (one request's) applied at once
                self._deliver(self.listener.on_acls, acls)
            self._purge(path, children)
            return None

        return on_children

    def _process(self, path: str, name: str, acls: dict[AclResource, frozenset[Ace]]) -> None:
        """Deliver a config's or a token's change; an ACL change's resource and ACEs go to ``acls``."""
        data, _ = self.state.zk.call(self.state.zk.kazoo.get, f"{path}/{name}")
        if path == CONFIG_CHANGES_PATH:
            entity_path = json.loads(data)["entity_path"]
            self._deliver(self.listener.on_entity_config, entity_path, self.state.entity_config(entity_path))
            return
        if path == TOKEN_CHANGES_PATH:
            token_id = data.decode()
            self._deliver(self.listener.on_delegation_token, token_id, self.state.delegation_token(token_id))
            return
        if path == ACL_CHANGES_PATH:
            resource_type, _, resource_name = data.decode().partition(":")
            resource = AclResource(resource_type, LITERAL, resource_name)
        else:
            doc = json.loads(data)
            resource = AclResource(doc["resourceType"], doc["patternType"].upper(), doc["name"])
        acls[resource] = self.state.acls_of(resource)

    def _purge(self, path: str, children: list[str]) -> None:
        """Delete notifications older than NOTIFICATION_EXPIRY_S (any broker may; Kafka does it too)."""
        kazoo = self.state.zk.kazoo
        now_ms = time.time() * 1000
        for name in children:
            try:
                stat = kazoo.exists(f"{path}/{name}")
                if stat is not None and now_ms - stat.ctime > NOTIFICATION_EXPIRY_S * 1000:
                    kazoo.delete(f"{path}/{name}")
            except NoNodeError:
                pass
            except Exception:  # noqa: BLE001 - purging is housekeeping
                log.debug("could not purge %s/%s", path, name, exc_info=True)

    def _deliver(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or self._stopped:
            return
        try:
            loop.call_soon_threadsafe(_call, fn, args)
        except RuntimeError:
            pass


def _call(fn: Callable[..., None], args: tuple[Any, ...]) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - a listener bug must not stop delivery
        log.exception("dynamic state listener %s failed", getattr(fn, "__name__", fn))
