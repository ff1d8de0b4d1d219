"""Cluster mode: quotas, SCRAM credentials, dynamic broker configs, ACLs and delegation tokens shared by
every broker.

``ClusterDynamicState`` is the metadata store's ``ClusterStatePublisher`` (a change a broker is asked
for is written to ZooKeeper first, controller/zk_dynamic_state.py, and only then kept in the broker's
store) and the ``DynamicStateListener`` of the ZooKeeper watcher (what any broker wrote is applied to
this broker's store, its authorizer and its dynamic broker config).  At start the store is made
equal to ZooKeeper's state, which is the truth of the cluster.

ZooKeeper writes are blocking calls made on the event loop: they happen on admin requests only and
take a round trip to ZooKeeper, as Kafka's ZK-mode AdminManager makes them on its request threads.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pybroker.config import ConfigError
from pybroker.controller.zk_dynamic_state import (
    DEFAULT_ENTITY,
    Ace,
    AclResource,
    ZkDynamicState,
    ZkDynamicStateWatcher,
    desanitize,
    sanitize,
)
from pybroker.metadata.store import MetadataStore, QuotaChanges
from pybroker.protocol.errors import ErrorCode, KafkaError
from pybroker.quotas.client_quotas import CLIENT_ID, IP, USER
from pybroker.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from pybroker.security.delegation_token import TokenInformation
from pybroker.security.scram import ScramCredential

if TYPE_CHECKING:
    from pybroker.controller.zk_client import KafkaZkClient
    from pybroker.security.authorizer import Authorizer

log = logging.getLogger(__name__)

EntityKey = tuple[tuple[str, str | None], ...]
SCRAM_PREFIX = "SCRAM-"


def _kafka_name(name: str) -> str:
    """TRANSACTIONAL_ID -> TransactionalId: Kafka's names in ZooKeeper paths and ACL JSON."""
    return "".join(part.title() for part in name.split("_"))


_RESOURCE_TYPES = {_kafka_name(t.name): t for t in ResourceType if t > ResourceType.ANY}
_OPERATIONS = {_kafka_name(o.name): o for o in AclOperation if o > AclOperation.ANY}
_PERMISSIONS = {_kafka_name(p.name): p for p in (AclPermissionType.ALLOW, AclPermissionType.DENY)}


def acl_resource(acl: AclBinding) -> AclResource:
    return AclResource(_kafka_name(acl.resource_type.name), acl.pattern_type.name, acl.resource_name)


def ace_of(acl: AclBinding) -> Ace:
    return (acl.principal, acl.host, _kafka_name(acl.operation.name), _kafka_name(acl.permission_type.name))


def binding(resource: AclResource, ace: Ace) -> AclBinding:
    principal, host, operation, permission = ace
    return AclBinding(
        _RESOURCE_TYPES[resource.resource_type],
        resource.name,
        PatternType[resource.pattern_type],
        principal,
        host,
        _OPERATIONS[operation],
        _PERMISSIONS[permission],
    )


def quota_entity_path(key: EntityKey) -> str:
    """An AlterClientQuotas entity's /config path (Kafka's ZK layout)."""
    names = {t: sanitize(DEFAULT_ENTITY if n is None else n) for t, n in key}
    if IP in names:
        return f"ips/{names[IP]}"
    if USER in names and CLIENT_ID in names:
        return f"users/{names[USER]}/clients/{names[CLIENT_ID]}"
    if USER in names:
        return f"users/{names[USER]}"
    return f"clients/{names[CLIENT_ID]}"


def quota_entity_key(entity_path: str) -> EntityKey:
    parts = entity_path.split("/")

    def name(raw: str) -> str | None:
        value = desanitize(raw)
        return None if value == DEFAULT_ENTITY else value

    if parts[0] == "ips":
        return ((IP, name(parts[1])),)
    if parts[0] == "clients":
        return ((CLIENT_ID, name(parts[1])),)
    if len(parts) == 4:  # users/<user>/clients/<client>
        return tuple(sorted(((USER, name(parts[1])), (CLIENT_ID, name(parts[3])))))
    return ((USER, name(parts[1])),)


def format_scram(credential: ScramCredential) -> str:
    """ScramCredentialUtils.credentialToString."""
    b64 = base64.b64encode
    return (
        f"salt={b64(credential.salt).decode()},stored_key={b64(credential.stored_key).decode()},"
        f"server_key={b64(credential.server_key).decode()},iterations={credential.iterations}"
    )


def parse_scram(text: str) -> ScramCredential:
    fields = dict(part.split("=", 1) for part in text.split(","))
    dec = base64.b64decode
    return ScramCredential(
        dec(fields["salt"]), dec(fields["stored_key"]), dec(fields["server_key"]), int(fields["iterations"])
    )


class ClusterDynamicState:
    def __init__(
        self,
        zk: KafkaZkClient,
        store: MetadataStore,
        node_id: int,
        authorizer: Callable[[], Authorizer | None],
        set_broker_configs: Callable[[str, dict[str, str]], None],
        group_configs: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.zk_state = ZkDynamicState(zk)
        self.watcher = ZkDynamicStateWatcher(self.zk_state, self)
        self.store = store
        self.node_id = node_id
        self._authorizer = authorizer
        self._set_broker_configs = set_broker_configs  # validated and applied to this broker (LocalController)
        # The broker's group configs (share and streams group keys), the cluster's: /config/groups/<group>.
        self.group_configs = group_configs if group_configs is not None else {}
        self._snapshot: tuple[dict[str, dict[str, str]], dict[AclResource, frozenset[Ace]]] = ({}, {})
        self._token_snapshot: dict[str, dict[str, Any]] = {}

    # -- start: the store becomes what ZooKeeper holds ------------------------------------------------
    def sync_from_zookeeper(self) -> None:
        """Blocking (run in a thread before the watches start): read everything ZooKeeper holds;
        ``apply_snapshot`` then applies it on the loop."""
        self.watcher.mark_seen()
        self._snapshot = self.zk_state.read_all()
        self._token_snapshot = self.zk_state.delegation_tokens()

    def apply_snapshot(self) -> None:
        configs, acls = self._snapshot
        paths = set(configs)
        paths.update(quota_entity_path(key) for key in self.store.client_quotas)
        paths.update(f"users/{sanitize(user)}" for user in self.store.scram_credentials)
        paths.update(f"brokers/{sanitize(self._broker_entity(name))}" for name in self.store.broker_configs)
        paths.update(f"groups/{sanitize(group)}" for group in self.group_configs)
        for path in sorted(paths):
            self.on_entity_config(path, configs.get(path, {}))
        self._replace_acls({binding(r, ace) for r, aces in acls.items() for ace in aces})
        for token_id in sorted(set(self._token_snapshot) | set(self.store.delegation_tokens)):
            self.on_delegation_token(token_id, self._token_snapshot.get(token_id))
        log.info("cluster state from ZooKeeper: %d config entities, %d ACL resources", len(configs), len(acls))

    async def start_watching(self) -> None:
        await self.watcher.start()

    def stop(self) -> None:
        self.watcher.stop()

    @staticmethod
    def _broker_entity(resource_name: str) -> str:
        return DEFAULT_ENTITY if resource_name == "" else resource_name

    # -- ClusterStatePublisher: writes go to ZooKeeper first -------------------------------------------
    def _publish(self, what: str, write: Callable[[], None]) -> None:
        try:
            write()
        except KafkaError:
            raise
        except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable, session lost: the change fails whole
            log.warning("could not write %s to ZooKeeper: %s", what, e)
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"could not write {what} to ZooKeeper: {e}") from e

    def publish_client_quotas(self, changes: QuotaChanges) -> None:
        def write() -> None:
            for key, ops in changes.items():
                self.zk_state.change_entity_config(
                    quota_entity_path(key), {k: None if v is None else repr(float(v)) for k, v in ops.items()}
                )

        self._publish("client quotas", write)

    def publish_scram_credentials(
        self, deletions: list[tuple[str, str]], upsertions: list[tuple[str, str, ScramCredential]]
    ) -> None:
        by_user: dict[str, dict[str, str | None]] = {}
        for user, mechanism in deletions:
            by_user.setdefault(user, {})[mechanism] = None
        for user, mechanism, credential in upsertions:
            by_user.setdefault(user, {})[mechanism] = format_scram(credential)

        def write() -> None:
            for user, changes in by_user.items():
                self.zk_state.change_entity_config(f"users/{sanitize(user)}", changes)

        self._publish("SCRAM credentials", write)

    def publish_broker_configs(self, resource_name: str, old: Mapping[str, str], new: Mapping[str, str]) -> None:
        changes: dict[str, str | None] = {k: None for k in old if k not in new}
        changes.update(new)
        path = f"brokers/{sanitize(self._broker_entity(resource_name))}"
        self._publish("dynamic broker configs", lambda: self.zk_state.change_entity_config(path, changes))

    def publish_group_configs(self, group_id: str, old: dict[str, str], new: dict[str, str]) -> None:
        changes: dict[str, str | None] = {k: None for k in old if k not in new}
        changes.update(new)
        path = f"groups/{sanitize(group_id)}"
        self._publish("group configs", lambda: self.zk_state.change_entity_config(path, changes))

    def publish_acls(self, old: Mapping[uuid.UUID, AclBinding], new: Mapping[uuid.UUID, AclBinding]) -> None:
        before, after = set(old.values()), set(new.values())
        changes: dict[AclResource, tuple[set[Ace], set[Ace]]] = {}
        for acl in after - before:
            changes.setdefault(acl_resource(acl), (set(), set()))[0].add(ace_of(acl))
        for acl in before - after:
            changes.setdefault(acl_resource(acl), (set(), set()))[1].add(ace_of(acl))

        self._publish("ACLs", lambda: self.zk_state.change_acls(changes))

    def publish_delegation_token(self, token: TokenInformation) -> None:
        self._publish(
            "a delegation token", lambda: self.zk_state.set_delegation_token(token.token_id, token.to_json())
        )

    def publish_delegation_token_removals(self, token_ids: list[str]) -> None:
        def write() -> None:
            for token_id in token_ids:
                self.zk_state.remove_delegation_token(token_id)

        self._publish("delegation token removals", write)

    # -- DynamicStateListener: what ZooKeeper says, on the loop ----------------------------------------
    def on_entity_config(self, entity_path: str, config: dict[str, str]) -> None:
        entity_type = entity_path.split("/", 1)[0]
        if entity_type == "brokers":
            self._apply_broker_configs(desanitize(entity_path.split("/", 1)[1]), config)
            return
        if entity_type == "groups":
            group_id = desanitize(entity_path.split("/", 1)[1])
            if config:
                self.group_configs[group_id] = dict(config)
            else:
                self.group_configs.pop(group_id, None)
            return
        quotas = {k: float(v) for k, v in config.items() if not k.startswith(SCRAM_PREFIX)}
        key = quota_entity_key(entity_path)
        current = self.store.client_quotas.get(key, {})
        if quotas != current:
            changes: dict[str, float | None] = {k: None for k in current if k not in quotas}
            changes.update(quotas)
            with self.store.applying_cluster_state():
                self.store.alter_client_quotas({key: changes})
        if entity_type == "users" and len(entity_path.split("/")) == 2:
            self._apply_scram(desanitize(entity_path.split("/")[1]), config)

    def _apply_scram(self, user: str, config: Mapping[str, str]) -> None:
        wanted = {k: parse_scram(v) for k, v in config.items() if k.startswith(SCRAM_PREFIX)}
        current = self.store.scram_credentials.get(user, {})
        if wanted == current:
            return
        deletions = [(user, mechanism) for mechanism in current if mechanism not in wanted]
        upsertions = [(user, mechanism, credential) for mechanism, credential in wanted.items()]
        with self.store.applying_cluster_state():
            self.store.alter_scram_credentials(deletions, upsertions)

    def _apply_broker_configs(self, entity: str, config: dict[str, str]) -> None:
        if entity == DEFAULT_ENTITY:
            resource_name = ""
        elif entity == str(self.node_id):
            resource_name = entity
        else:
            return  # another broker's own dynamic configs
        if self.store.broker_configs.get(resource_name, {}) == config:
            return
        try:
            with self.store.applying_cluster_state():
                self._set_broker_configs(resource_name, config)
        except ConfigError as e:
            log.warning("dynamic broker configs of %s from ZooKeeper not applied: %s", entity, e)

    def on_delegation_token(self, token_id: str, token: dict[str, Any] | None) -> None:
        wanted = None if token is None else TokenInformation.from_json(token)
        if wanted == self.store.delegation_tokens.get(token_id):
            return
        with self.store.applying_cluster_state():
            if wanted is None:
                self.store.remove_delegation_tokens([token_id])
            else:
                self.store.set_delegation_token(wanted)

    def on_acls(self, changed: Mapping[AclResource, frozenset[Ace]]) -> None:
        kept = {acl for acl in self.store.acls.values() if acl_resource(acl) not in changed}
        self._replace_acls(kept | {binding(resource, ace) for resource, aces in changed.items() for ace in aces})

    def _replace_acls(self, wanted: Iterable[AclBinding]) -> None:
        wanted = set(wanted)
        if wanted == set(self.store.acls.values()):
            return
        # Ids of ACLs that stay keep theirs; new ones get new ids.
        by_value = {acl: i for i, acl in self.store.acls.items()}
        acls = {by_value.get(acl) or uuid.uuid4(): acl for acl in wanted}
        with self.store.applying_cluster_state():
            self.store.set_acls(acls)
        authorizer = self._authorizer()
        if authorizer is not None:
            authorizer.reload()

