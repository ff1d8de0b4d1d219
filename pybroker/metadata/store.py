"""The single-node metadata image: topics (stable topic ids, partition counts, config overrides)
and the producer-id block.

On a Kafka cluster this state lives in the controller (ZooKeeper or the KRaft metadata log); a
single broker keeps it in one JSON document written atomically beside its logs.  Replication work
replaces the file with the controller's store without changing this interface.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pybroker.security.acl import AclBinding
from pybroker.security.delegation_token import TokenInformation
from pybroker.security.scram import ScramCredential
from pybroker.storage.checkpoint import write_atomically
from pybroker.storage.errors import KafkaStorageError

log = logging.getLogger(__name__)

FILE_NAME = "pybroker-metadata.json"
# Space kept aside for the metadata document, so that a change that frees space (deleting a topic)
# can still be written when the disk is full: the file is deleted to make room for that write and
# made again once there is room.  Twice the document (the new copy is written before the old one
# goes), and at least this much.
RESERVE_FILE_NAME = "pybroker-metadata.reserve"
MIN_RESERVE_BYTES = 256 * 1024
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249
PRODUCER_ID_BLOCK = 1000


# Kafka's org.apache.kafka.common.internals.Topic.isInternal: clients may not produce to these.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


class InvalidTopicName(ValueError):
    pass


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules (org.apache.kafka.common.internals.Topic.validate)."""
    if not name:
        raise InvalidTopicName("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicName('Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicName(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicName(
            f"Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )


@dataclass
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "partitions": self.partitions,
            "configs": self.configs,
            "internal": self.internal,
        }

    @classmethod
    def from_json(cls, d: dict) -> TopicRecord:
        return cls(
            d["name"], uuid.UUID(d["topic_id"]), int(d["partitions"]), dict(d["configs"]), bool(d["internal"])
        )


QuotaChanges = dict[tuple[tuple[str, str | None], ...], dict[str, float | None]]


class ClusterStatePublisher(Protocol):
    """Cluster mode: state every broker shares (quotas, SCRAM credentials, dynamic broker configs,
    ACLs) is published to the cluster (ZooKeeper) before this store keeps it; each method raises a
    KafkaError when the change could not be published, and then nothing changes here."""

    def publish_client_quotas(self, changes: QuotaChanges) -> None: ...

    def publish_scram_credentials(
        self, deletions: list[tuple[str, str]], upsertions: list[tuple[str, str, ScramCredential]]
    ) -> None: ...

    def publish_broker_configs(self, resource_name: str, old: Mapping[str, str], new: Mapping[str, str]) -> None: ...

    def publish_acls(self, old: Mapping[uuid.UUID, AclBinding], new: Mapping[uuid.UUID, AclBinding]) -> None: ...

    def publish_delegation_token(self, token: TokenInformation) -> None: ...

    def publish_delegation_token_removals(self, token_ids: list[str]) -> None: ...


class MetadataStore:
    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self.topics: dict[str, TopicRecord] = {}
        self.topics_by_id: dict[uuid.UUID, TopicRecord] = {}
        self._next_producer_id = 0
        self._producer_id_block_end = 0
        self.cluster_id: str | None = None
        self._last_size = 0  # bytes of the document last written (sizes the reserve)
        # Dynamic broker configs by resource name ("" the cluster default, "<node id>" one broker),
        # as Kafka keeps them in its metadata log (ConfigRecords of the BROKER resource).
        self.broker_configs: dict[str, dict[str, str]] = {}
        # Client quotas (AlterClientQuotas) by entity: sorted (entity type, name or None for <default>)
        # pairs -> {quota key: value}, as Kafka keeps ClientQuotaRecords.  The quota managers read this
        # very dict, so a change applies to the next request.
        self.client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = {}
        # Client-metrics subscriptions (KIP-714): CLIENT_METRICS config resource name -> its configs.
        self.client_metrics: dict[str, dict[str, str]] = {}
        # ACLs by id, as Kafka's controller keeps AccessControlEntryRecords (the authorizer indexes them).
        self.acls: dict[uuid.UUID, AclBinding] = {}
        # SCRAM credentials by user, then mechanism name (Kafka's UserScramCredentialRecords): salt,
        # StoredKey, ServerKey and iterations, never a password.
        self.scram_credentials: dict[str, dict[str, ScramCredential]] = {}
        # Delegation tokens by id (Kafka's DelegationTokenRecords; in ZooKeeper /delegation_token/tokens), never
        # their HMACs: the token manager computes those from delegation.token.secret.key.
        self.delegation_tokens: dict[str, TokenInformation] = {}
        # Told the id of every delegation token added, changed or removed (the token manager's cache follows).
        self.delegation_token_listener: Callable[[str], None] | None = None
        # Finalized features (UpdateFeatures) and their epoch; None until a change was made (then a
        # new cluster's levels apply, metadata/features.py).
        self.finalized_features: dict[str, int] | None = None
        self.finalized_features_epoch = 0
        # Told the name of every topic added, removed or changed (written or undone): the metadata
        # image (metadata/local.py) rebuilds that topic.
        self.topic_listener: Callable[[str], None] | None = None
        # Cluster mode: shared state goes to the cluster first (None on a single broker).
        self.publisher: ClusterStatePublisher | None = None
        self._publishing = True  # False while applying what the cluster says (nothing to publish back)

    def load(self) -> None:
        if not self.path.exists():
            return
        text = self.path.read_text()
        self._last_size = len(text)
        doc = json.loads(text)
        for t in doc.get("topics", []):
            rec = TopicRecord.from_json(t)
            self.topics[rec.name] = rec
            self.topics_by_id[rec.topic_id] = rec
        # Never hand out an id from a block that may already have been used before a crash.
        self._next_producer_id = self._producer_id_block_end = int(doc.get("producer_id_block_end", 0))
        self.broker_configs = {str(k): dict(v) for k, v in doc.get("broker_configs", {}).items()}
        for q in doc.get("client_quotas", []):
            key = tuple(sorted((str(t), None if n is None else str(n)) for t, n in q["entity"]))
            self.client_quotas[key] = {str(k): float(v) for k, v in q["values"].items()}
        self.client_metrics = {str(k): dict(v) for k, v in doc.get("client_metrics", {}).items()}
        self.acls = {uuid.UUID(a["id"]): AclBinding.from_json(a) for a in doc.get("acls", [])}
        self.scram_credentials = {
            user: {mech: ScramCredential.from_json(c) for mech, c in by_mech.items()}
            for user, by_mech in doc.get("scram_credentials", {}).items()
        }
        self.delegation_tokens = {
            t.token_id: t for t in (TokenInformation.from_json(d) for d in doc.get("delegation_tokens", []))
        }
        if "finalized_features" in doc:
            self.finalized_features = {str(k): int(v) for k, v in doc["finalized_features"].items()}
            self.finalized_features_epoch = int(doc.get("finalized_features_epoch", 0))
        log.info("loaded metadata for %d topics from %s", len(self.topics), self.path)

    def save(self, *, may_use_reserve: bool = False) -> None:
        """Write the document atomically.  On a full disk, only a change that frees space
        (``may_use_reserve``) gives up the reserve to be written; others raise KafkaStorageError."""
        data = json.dumps(self._document(), indent=1, sort_keys=True).encode()
        try:
            write_atomically(self.path, data)
        except OSError as e:
            if e.errno != errno.ENOSPC or not may_use_reserve or not self.reserve_path.exists():
                raise KafkaStorageError(f"writing {self.path.name} failed: {e.strerror or e}", e.errno) from e
            log.warning("disk full: deleting the metadata reserve to record a change that frees space")
            self.reserve_path.unlink()
            try:
                write_atomically(self.path, data)
            except OSError as e2:
                raise KafkaStorageError(f"writing {self.path.name} failed: {e2.strerror or e2}", e2.errno) from e2
        self._last_size = len(data)

    def _document(self) -> dict:
        return {
            "version": 1,
            "topics": [t.to_json() for t in sorted(self.topics.values(), key=lambda t: t.name)],
            "producer_id_block_end": self._producer_id_block_end,
            "broker_configs": {k: v for k, v in self.broker_configs.items() if v},
            "client_quotas": [
                {"entity": [list(e) for e in key], "values": values}
                for key, values in sorted(self.client_quotas.items(), key=lambda kv: repr(kv[0]))
                if values
            ],
            "client_metrics": {k: v for k, v in self.client_metrics.items() if v},
            "acls": [{"id": str(i), **acl.to_json()} for i, acl in self.acls.items()],
            "scram_credentials": {
                user: {mech: c.to_json() for mech, c in sorted(by_mech.items())}
                for user, by_mech in sorted(self.scram_credentials.items())
                if by_mech
            },
            "delegation_tokens": [t.to_json() for _, t in sorted(self.delegation_tokens.items())],
            **(
                {"finalized_features": self.finalized_features, "finalized_features_epoch": self.finalized_features_epoch}
                if self.finalized_features is not None
                else {}
            ),
        }

    @property
    def reserve_path(self) -> Path:
        return self.path.with_name(RESERVE_FILE_NAME)

    def ensure_reserve(self) -> bool:
        """Make (or grow) the reserve file when there is room; True if it is in place."""
        wanted = max(MIN_RESERVE_BYTES, 2 * self._last_size)
        try:
            if self.reserve_path.stat().st_size >= wanted:
                return True
        except FileNotFoundError:
            pass
        try:
            fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.posix_fallocate(fd, 0, wanted)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            try:
                self.reserve_path.unlink()  # a partial reserve would only hide the missing one
            except OSError:
                pass
            log.debug("metadata reserve of %d bytes not made: %s", wanted, e)
            return False
        return True

    @contextmanager
    def applying_cluster_state(self) -> Iterator[None]:
        """Changes made inside come from the cluster: kept here, not published again."""
        self._publishing = False
        try:
            yield
        finally:
            self._publishing = True

    def _publisher(self) -> ClusterStatePublisher | None:
        return self.publisher if self._publishing else None

    def _change(self, apply: Callable[[], None], undo: Callable[[], None], *, frees_space: bool = False) -> None:
        """Apply a change in memory and write it; when the write fails, undo it and raise."""
        apply()
        try:
            self.save(may_use_reserve=frees_space)
        except KafkaStorageError:
            undo()
            raise

    def _topic_change(
        self, name: str, apply: Callable[[], None], undo: Callable[[], None], *, frees_space: bool = False
    ) -> None:
        try:
            self._change(apply, undo, frees_space=frees_space)
        finally:
            if self.topic_listener is not None:
                self.topic_listener(name)

    def add_topic(
        self,
        name: str,
        partitions: int,
        configs: dict[str, str],
        internal: bool = False,
        topic_id: uuid.UUID | None = None,
    ) -> TopicRecord:
        """``topic_id`` is given when the partitions' directories were made (and named in their
        partition.metadata) before the topic is recorded, as large CreateTopics do."""
        rec = TopicRecord(name, topic_id or uuid.uuid4(), partitions, dict(configs), internal)

        def apply() -> None:
            self.topics[name] = rec
            self.topics_by_id[rec.topic_id] = rec

        def undo() -> None:
            self.topics.pop(name, None)
            self.topics_by_id.pop(rec.topic_id, None)

        self._topic_change(name, apply, undo)
        return rec

    def remove_topic(self, name: str) -> TopicRecord:
        rec = self.topics[name]

        def apply() -> None:
            del self.topics[name]
            self.topics_by_id.pop(rec.topic_id, None)

        def undo() -> None:
            self.topics[name] = rec
            self.topics_by_id[rec.topic_id] = rec

        self._topic_change(name, apply, undo, frees_space=True)
        return rec

    def set_partitions(self, name: str, partitions: int) -> None:
        rec = self.topics[name]
        old = rec.partitions
        self._topic_change(
            name, lambda: setattr(rec, "partitions", partitions), lambda: setattr(rec, "partitions", old)
        )

    def set_internal(self, name: str) -> None:
        """Mark a topic internal (the coordinators' own topics, made before they were marked)."""
        rec = self.topics[name]
        self._topic_change(name, lambda: setattr(rec, "internal", True), lambda: setattr(rec, "internal", False))

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        rec = self.topics[name]
        old = rec.configs
        # Lowering retention is how an operator frees a full disk: this change may use the reserve.
        self._topic_change(
            name,
            lambda: setattr(rec, "configs", dict(configs)),
            lambda: setattr(rec, "configs", old),
            frees_space=True,
        )

    def set_broker_configs(self, resource_name: str, configs: dict[str, str]) -> None:
        old = self.broker_configs.get(resource_name)
        if (publisher := self._publisher()) is not None:
            publisher.publish_broker_configs(resource_name, old or {}, configs)

        def undo() -> None:
            if old is None:
                self.broker_configs.pop(resource_name, None)
            else:
                self.broker_configs[resource_name] = old

        # A lower broker-wide retention frees space too: this change may use the reserve.
        self._change(
            lambda: self.broker_configs.__setitem__(resource_name, dict(configs)), undo, frees_space=True
        )

    def alter_client_quotas(self, changes: dict[tuple[tuple[str, str | None], ...], dict[str, float | None]]) -> None:
        """Apply quota changes (a None value removes the key) and write them, all or nothing."""
        if (publisher := self._publisher()) is not None:
            publisher.publish_client_quotas(changes)
        old = {key: dict(self.client_quotas[key]) for key in changes if key in self.client_quotas}

        def apply() -> None:
            for key, ops in changes.items():
                values = dict(self.client_quotas.get(key, {}))
                for name, value in ops.items():
                    if value is None:
                        values.pop(name, None)
                    else:
                        values[name] = value
                if values:
                    self.client_quotas[key] = values
                else:
                    self.client_quotas.pop(key, None)

        def undo() -> None:
            for key in changes:
                if key in old:
                    self.client_quotas[key] = old[key]
                else:
                    self.client_quotas.pop(key, None)

        self._change(apply, undo)

    def set_client_metrics(self, name: str, configs: dict[str, str]) -> None:
        """Replace the client-metrics subscription ``name``'s configs; empty configs remove it."""
        old = self.client_metrics.get(name)

        def apply() -> None:
            if configs:
                self.client_metrics[name] = dict(configs)
            else:
                self.client_metrics.pop(name, None)

        def undo() -> None:
            if old is None:
                self.client_metrics.pop(name, None)
            else:
                self.client_metrics[name] = old

        self._change(apply, undo)

    def set_acls(self, acls: dict[uuid.UUID, AclBinding]) -> None:
        """Replace the ACL set in one atomic write; on failure nothing changes (KafkaStorageError)."""
        old = self.acls
        if (publisher := self._publisher()) is not None:
            publisher.publish_acls(old, acls)
        # Deleting ACLs only shrinks the document: such a change may use the reserve.
        self._change(
            lambda: setattr(self, "acls", dict(acls)), lambda: setattr(self, "acls", old), frees_space=len(acls) < len(old)
        )

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.scram_credentials.get(user, {}).get(mechanism)

    def alter_scram_credentials(
        self, deletions: list[tuple[str, str]], upsertions: list[tuple[str, str, ScramCredential]]
    ) -> None:
        """Apply one AlterUserScramCredentials request's accepted changes in one write (atomic, as Kafka's
        controller applies them as one batch of records)."""
        if (publisher := self._publisher()) is not None:
            publisher.publish_scram_credentials(deletions, upsertions)
        old = {user: dict(by_mech) for user, by_mech in self.scram_credentials.items()}

        def apply() -> None:
            for user, mechanism in deletions:
                self.scram_credentials.get(user, {}).pop(mechanism, None)
                if not self.scram_credentials.get(user, True):
                    del self.scram_credentials[user]
            for user, mechanism, credential in upsertions:
                self.scram_credentials.setdefault(user, {})[mechanism] = credential

        def undo() -> None:
            self.scram_credentials = old

        self._change(apply, undo)

    def set_delegation_token(self, token: TokenInformation) -> None:
        """Add a token or replace it (a renewal's new expiry): one write, as Kafka's DelegationTokenRecord."""
        if (publisher := self._publisher()) is not None:
            publisher.publish_delegation_token(token)
        old = self.delegation_tokens.get(token.token_id)

        def undo() -> None:
            if old is None:
                self.delegation_tokens.pop(token.token_id, None)
            else:
                self.delegation_tokens[token.token_id] = old

        self._change(lambda: self.delegation_tokens.__setitem__(token.token_id, token), undo)
        self._token_changed(token.token_id)

    def remove_delegation_tokens(self, token_ids: list[str]) -> None:
        """Remove tokens (expired, or expired at once by their owner): Kafka's RemoveDelegationTokenRecords."""
        token_ids = [i for i in token_ids if i in self.delegation_tokens]
        if not token_ids:
            return
        if (publisher := self._publisher()) is not None:
            publisher.publish_delegation_token_removals(token_ids)
        old = dict(self.delegation_tokens)

        def apply() -> None:
            for token_id in token_ids:
                del self.delegation_tokens[token_id]

        self._change(apply, lambda: setattr(self, "delegation_tokens", old), frees_space=True)
        for token_id in token_ids:
            self._token_changed(token_id)

    def _token_changed(self, token_id: str) -> None:
        if self.delegation_token_listener is not None:
            self.delegation_token_listener(token_id)
    def set_finalized_features(self, levels: dict[str, int], epoch: int) -> None:
        """Keep UpdateFeatures' new levels (written before the change is answered)."""
        old = (self.finalized_features, self.finalized_features_epoch)

        def apply() -> None:
            self.finalized_features, self.finalized_features_epoch = dict(levels), epoch

        def undo() -> None:
            self.finalized_features, self.finalized_features_epoch = old

        self._change(apply, undo)

    def allocate_producer_id(self) -> int:
        """Ids come from persisted blocks, as Kafka's ProducerIdManager does, so an id is never
        reused across restarts even though only the block boundary is written."""
        if self._next_producer_id >= self._producer_id_block_end:
            old = self._producer_id_block_end
            self._change(
                lambda: setattr(self, "_producer_id_block_end", self._next_producer_id + PRODUCER_ID_BLOCK),
                lambda: setattr(self, "_producer_id_block_end", old),
            )
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid
