"""One broker's membership of a ZooKeeper cluster, in one object for the broker's wiring.

    membership = ZkClusterMembership.from_config(config, listener=my_metadata_listener)
    await membership.start()      # session, /brokers/ids/<id>, metadata watches, controller election
    ...
    membership.controller         # KafkaController: is_active, elect_leaders, reassignments, controlled_shutdown
    membership.loader             # ZkMetadataLoader: brokers, topics, partitions, alter_isr
    membership.zk                 # KafkaZkClient: create_topic, add_partitions, request_topic_deletion
    await membership.stop()       # controller resigns, the session closes (ephemeral znodes go at once)

Start-up order is Kafka's (KafkaServer.startup in ZK mode): connect, create the top-level paths, register
the broker, then start the controller. A broker restarted after a crash may find its previous
registration still there until that session expires: start() waits for it, up to the session timeout
and a margin, instead of failing as Kafka does.
"""

from __future__ import annotations

import asyncio
import logging
import time

from pybroker.config import BrokerConfig
from pybroker.controller.controller import ControllerConfig, KafkaController
from pybroker.controller.metadata_loader import MetadataListener, ZkMetadataLoader
from pybroker.controller.zk_client import BrokerIdInUseError, KafkaZkClient
from pybroker.controller.zk_data import BrokerInfo

logger = logging.getLogger(__name__)


class ZkClusterMembership:
    def __init__(
        self,
        connect: str,
        info: BrokerInfo,
        listener: MetadataListener,
        *,
        controller_config: ControllerConfig | None = None,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int | None = None,
    ) -> None:
        self.info = info
        self.broker_id = info.broker_id
        self.session_timeout_ms = session_timeout_ms
        self.zk = KafkaZkClient(
            connect, session_timeout_ms=session_timeout_ms, connection_timeout_ms=connection_timeout_ms
        )
        self.loader = ZkMetadataLoader(self.zk, info.broker_id, listener)
        self.controller = KafkaController(self.zk, info.broker_id, controller_config)

    @property
    def broker_epoch(self) -> int:
        """The czxid of the current registration (-1 before it): after a lost session the broker
        registers again and the epoch changes, as Kafka's RegisterBrokerAndReelect updates it."""
        return self.zk.broker_epoch

    @classmethod
    def from_config(
        cls, config: BrokerConfig, listener: MetadataListener, *, host: str, port: int
    ) -> ZkClusterMembership:
        """From the broker's settings; ``host``/``port`` are the advertised address (the bound port when
        the configured one is 0)."""
        listener_name = config.get("inter.broker.listener.name") or "PLAINTEXT"
        # Every advertised listener is registered, as Kafka does: Metadata answers a client with the
        # brokers' endpoints of the listener it connected on (an SSL client must not be sent to a
        # PLAINTEXT port); other brokers reach this one on the inter-broker listener (host, port).
        endpoints = [f"{listener_name}://{host}:{port}"]
        protocols = {listener_name: "PLAINTEXT"}
        for endpoint in config.advertised_endpoints:
            protocols[endpoint.listener_name] = endpoint.security_protocol
            if endpoint.listener_name != listener_name:
                ep_host, ep_port = config.advertised_host_port(endpoint.listener_name)
                endpoints.append(f"{endpoint.listener_name}://{ep_host}:{ep_port}")
        info = BrokerInfo(
            broker_id=config.get("node.id"),
            host=host,
            port=port,
            rack=config.get("broker.rack"),
            endpoints=tuple(endpoints),
            listener_security_protocol_map=protocols,
        )
        return cls(
            config.get("zookeeper.connect"),
            info,
            listener,
            controller_config=ControllerConfig.from_broker_config(config),
            session_timeout_ms=config.get("zookeeper.session.timeout.ms"),
            connection_timeout_ms=config.get("zookeeper.connection.timeout.ms"),
        )

    async def start(self) -> None:
        await asyncio.to_thread(self.zk.start)
        deadline = time.monotonic() + self.session_timeout_ms / 1000 * 1.5 + 5
        while True:
            try:
                await asyncio.to_thread(self.zk.register_broker, self.info)
                break
            except BrokerIdInUseError:
                if time.monotonic() > deadline:
                    raise
                logger.info("broker id %d still registered by an earlier session; waiting for it to expire",
                            self.broker_id)
                await asyncio.sleep(0.5)
        logger.info("broker %d registered in ZooKeeper (broker epoch %d)", self.broker_id, self.broker_epoch)
        await self.loader.start()
        await self.controller.startup()

    async def stop(self) -> None:
        self.loader.stop()
        await self.controller.shutdown()
        await asyncio.to_thread(self.zk.close)
