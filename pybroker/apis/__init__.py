"""API handlers, one module per API family, each registering the versions it implements.

ApiVersions is computed from this registry, never written by hand: what is registered here is
exactly what the broker advertises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pybroker.security.context import ConnectionSecurity, KafkaPrincipal, plaintext_context

if TYPE_CHECKING:
    from pybroker.apis.metadata import TopicMetadataCache
    from pybroker.apis.services import BrokerServices, TopicAdmin
    from pybroker.metadata.image import MetadataImage
    from pybroker.metrics.recorder import BrokerMetrics
    from pybroker.protocol.codec import RequestHeader
    from pybroker.replication.replica_manager import ReplicaManager

Response = dict[str, Any] | None
HandlerFn = Callable[["RequestContext", dict[str, Any]], Response | Awaitable[Response]]


@dataclass(slots=True)
class RequestContext:
    services: BrokerServices  # what handlers may use of the broker (apis/services.py)
    header: RequestHeader
    peer: str
    metrics: BrokerMetrics  # running totals the handlers bump (bytes and messages per topic)
    # The connection's listener, security protocol and principal (shared by its requests).
    security: ConnectionSecurity = field(default_factory=plaintext_context)

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def principal(self) -> KafkaPrincipal:
        return self.security.principal

    @property
    def listener_name(self) -> str:
        return self.security.listener_name

    @property
    def security_protocol(self) -> str:
        return self.security.security_protocol

    @property
    def replica_manager(self) -> ReplicaManager:
        return self.services.replica_manager

    @property
    def metadata_cache(self) -> TopicMetadataCache:
        return self.services.metadata_cache

    @property
    def topic_admin(self) -> TopicAdmin:
        return self.services.topic_admin

    def metadata_image(self) -> MetadataImage:
        return self.services.metadata_image()

    @property
    def client_host(self) -> str:
        """The client's address as ACL hosts name it (no port)."""
        return self.security.client_host


class CloseConnection(Exception):
    """The request cannot be answered in Kafka's protocol (as Kafka, which fails to parse it): the
    server logs the reason and closes the connection."""


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    fn: HandlerFn
    # Advertised minimum when it differs from the implemented one (Produce: KAFKA-18659, see produce.py).
    advertised_min: int | None = None


REGISTRY: dict[int, ApiHandler] = {}


def handles(api_key: int, min_version: int, max_version: int, *, advertised_min: int | None = None):
    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in REGISTRY:
            raise RuntimeError(f"api key {api_key} registered twice")
        REGISTRY[api_key] = ApiHandler(api_key, min_version, max_version, fn, advertised_min)
        return fn

    return register


def load_all() -> dict[int, ApiHandler]:
    """Import every handler module so it registers itself."""
    from pybroker.apis import (  # noqa: F401
        acls,
        admin,
        api_versions,
        client_quotas,
        config_resources,
        configs,
        consumer_groups,
        delegation_tokens,
        features,
        fetch,
        groups,
        log_dirs,
        metadata,
        offsets,
        partition_admin,
        produce,
        producer_ids,
        sasl,
        share_group_offsets,
        share_groups,
        share_state,
        streams_groups,
        telemetry,
        topic_partitions,
        transactions,
    )

    return REGISTRY
