"""What the API handlers may use of the broker: ``BrokerServices``, a narrow set of named services.

Handlers never see ``pybroker.broker``.  They read the metadata image (topics, partitions, brokers),
serve produce and fetch through the replica manager, change topics and configs through a
``TopicAdmin`` (the single broker's own controller, or a cluster's), and reach the group and
transaction coordinators.  The broker builds one ``BrokerServices`` and the server hands it to every
request in its ``RequestContext``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pybroker.apis.fetch_session import FetchSessions
    from pybroker.apis.metadata import TopicMetadataCache
    from pybroker.apis.telemetry import ClientMetricsManager
    from pybroker.config import BrokerConfig, ConfigSource
    from pybroker.controller.delegation_tokens import DelegationTokenManager
    from pybroker.coordinator.coordinator import GroupCoordinator
    from pybroker.coordinator.share.manager import ShareGroupService
    from pybroker.coordinator.share.persister import RemoteStatePersister
    from pybroker.coordinator.transaction.coordinator import TransactionCoordinator
    from pybroker.metadata.features import FinalizedFeatures
    from pybroker.metadata.image import MetadataImage
    from pybroker.metadata.store import MetadataStore, TopicRecord
    from pybroker.metrics.recorder import BrokerMetrics
    from pybroker.protocol.errors import KafkaError
    from pybroker.quotas.client_quotas import ClientQuotaManager
    from pybroker.replication.log_dir_mover import ReplicaAlterLogDirsManager
    from pybroker.replication.replica_manager import ReplicaManager
    from pybroker.security.authorizer import Authorizer


class TopicAdmin(Protocol):
    """Topic and configuration changes, as a controller applies them (KafkaApis forwards these to the
    controller).  Each raises KafkaError with the code the request answers."""

    def check_new_topic(
        self, name: str, num_partitions: int, configs: dict[str, str | None]
    ) -> dict[str, str]:
        """Validate a CreateTopics entry; the configs that are set."""
        ...

    async def create_topic_async(
        self,
        name: str,
        num_partitions: int,
        configs: dict[str, str | None],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        replication_factor: int = 1,
        assignments: dict[int, list[int]] | None = None,
    ) -> TopicRecord | None: ...

    def auto_create_topic(self, name: str) -> TopicRecord | None:
        """Create a topic a client named (Metadata with auto-creation), or None when not allowed."""
        ...

    async def delete_topic_async(
        self, name: str, topic_id: uuid.UUID | None = None, timeout_ms: int | None = None
    ) -> None: ...

    async def add_partitions(
        self,
        name: str,
        total: int,
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
        assignments: list[list[int]] | None = None,
    ) -> None: ...

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """set_topic_configs as the API does it: in a cluster, through ZooKeeper to every broker."""

    def dynamic_config_level(self, resource_name: str) -> ConfigSource: ...

    def set_dynamic_broker_configs(self, resource_name: str, configs: dict[str, str]) -> None: ...

    # Leadership and replica placement: the controller's (in a cluster the active controller, which a
    # broker that is not it reaches through ZooKeeper). ``timeout_ms`` bounds the wait (REQUEST_TIMED_OUT).
    async def elect_leaders(
        self, partitions: list[tuple[str, int]] | None, election_type: int, timeout_ms: int | None = None
    ) -> dict[tuple[str, int], KafkaError | None]:
        """Per partition None (elected) or the KafkaError it answers; None partitions: all."""
        ...

    async def alter_partition_reassignments(
        self,
        reassignments: dict[tuple[str, int], list[int] | None],
        allow_replication_factor_change: bool = True,
        timeout_ms: int | None = None,
    ) -> dict[tuple[str, int], KafkaError | None]: ...

    async def list_partition_reassignments(
        self, partitions: set[tuple[str, int]] | None = None, timeout_ms: int | None = None
    ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """Ongoing reassignments: (replicas, adding, removing) per partition."""
        ...


@dataclass(slots=True)
class BrokerServices:
    node_id: int
    config: BrokerConfig
    log_dirs: list[Path]
    replica_manager: ReplicaManager
    # The current metadata image (a call: a cluster publishes new images as its controller decides).
    metadata_image: Callable[[], MetadataImage]
    metadata_cache: TopicMetadataCache  # encoded Metadata topic entries (apis/metadata.py)
    topic_admin: TopicAdmin
    fetch_sessions: FetchSessions
    metrics: BrokerMetrics
    allocate_producer_id: Callable[[], int]
    # SCRAM credentials, kept in the metadata store as Kafka's controller keeps
    # UserScramCredentialRecords (DescribeUserScramCredentials / AlterUserScramCredentials).
    metadata_store: MetadataStore
    # controller_mutation_rate per user/client id (CreateTopics, CreatePartitions, DeleteTopics).
    controller_mutation_quotas: ClientQuotaManager
    # KIP-714 client-metrics subscriptions and the pushes received (apis/telemetry.py).
    client_metrics: ClientMetricsManager
    # Finalized features (ApiVersions, UpdateFeatures): the cluster's in ZooKeeper in cluster mode.
    features: FinalizedFeatures
    # KIP-48 delegation tokens (controller/delegation_tokens.py); None only in stand-ins without one.
    delegation_tokens: DelegationTokenManager | None = None
    # Set once they have started (None before: the handlers answer COORDINATOR_NOT_AVAILABLE).
    group_coordinator: GroupCoordinator | None = None
    transaction_coordinator: TransactionCoordinator | None = None
    # The authorizer when authorizer.class.name is set (apis/auth.py reads it), set at start.
    authorizer: Authorizer | None = None
    # KIP-932 share groups (coordinator/share/manager.py), made on first use by apis/share_groups.py.
    share_groups: ShareGroupService | None = None
    # Moves of replicas between this broker's log dirs (AlterReplicaLogDirs), set at start.
    log_dir_mover: ReplicaAlterLogDirsManager | None = None
    # Cluster mode: makes __share_group_state through ZooKeeper (ClusterMode.ensure_share_state_topic); the
    # share coordinator then follows the leadership of its partitions.
    share_state_topic_creator: Callable[[], None] | None = None
    # In a cluster: the share-state calls to a share coordinator on another broker (Kafka's persister).
    share_state_persister: RemoteStatePersister | None = None
    # Group configs (IncrementalAlterConfigs, resource type GROUP) by group id; in a cluster ZooKeeper's
    # /config/groups, kept equal on every broker (cluster_dynamic_state.py), and written there first.
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    publish_group_configs: Callable[[str, dict[str, str], dict[str, str]], None] | None = None
    # zookeeper.connect is set: this broker is one of a cluster (cluster_mode.py).
    cluster_mode: bool = False
    # Cluster mode: AddPartitionsToTxn to whichever broker coordinates a transactional id
    # (cluster_transactions.TransactionRouter: add_partitions, verify).
    transaction_router: Any = None
