"""An N-node Apache Kafka KRaft cluster on loopback: the replicated reference for issue 11.

Topology: N combined nodes (``process.roles=broker,controller``), all of them voters of one static
controller quorum (``controller.quorum.voters``).  Why combined rather than 1 controller + N brokers:
with a single controller its death stops every metadata change for good (no failover to test), while
a 3-voter quorum survives the loss of any one node, and a "controller kill" is a kill of the active
quorum leader, which is also a broker: the same shape as pybroker's ZooKeeper-elected controller,
which is one of the brokers.  It also costs N JVMs rather than N + 1 on a 2-core machine.

JVM: Kafka's stock flags (``kafka-server-start.sh``/``kafka-run-class.sh`` 4.3: G1, MaxGCPauseMillis=20
...) with the heap lowered from 1 GiB to 512 MiB per node (``CLUSTER_JVM``), so three nodes beside the
other test processes stay well within the machine; plus ``-Djava.net.preferIPv4Stack=true`` so the
fault proxy can find a node's sockets in ``/proc/net/tcp``.

With ``proxied=True`` every listener the nodes advertise (client/inter-broker and controller) is a
``fault_proxy`` port in front of the real one, so ``isolate(node)`` cuts a node off from clients, from
the other brokers and from the quorum.  Every node can be killed (SIGKILL), stopped (SIGTERM), frozen
(SIGSTOP/SIGCONT) and restarted on its data by pid.

    python -m compat_tests.reference.kafka_cluster run --dir D [--nodes 3] [--proxied]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from compat_tests.reference.apache_kafka import (
    DEFAULT_SETTINGS,
    STOCK_PERFORMANCE_OPTS,
    ApacheKafka,
    ApacheKafkaError,
    JvmProfile,
    free_port,
    install,
    internal_sasl_settings,
)
from compat_tests.reference.fault_proxy import FaultProxies, Route
from compat_tests.reference.kafka_probe import ProbeError, broker_ids
from pybroker.config import random_kafka_uuid

logger = logging.getLogger(__name__)

CLUSTER_JVM = JvmProfile(
    "cluster", ("-Xmx512m", "-Xms512m", *STOCK_PERFORMANCE_OPTS, "-Djava.net.preferIPv4Stack=true")
)

# The cluster defaults of the issue-11 harness: RF 3 everywhere, min.insync.replicas 2.
CLUSTER_SETTINGS: dict[str, str] = {
    **DEFAULT_SETTINGS,
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}

ProbeErrors = (OSError, struct.error, ProbeError)


@dataclass
class NodePorts:
    client: int  # the real PLAINTEXT listener
    controller: int  # the real CONTROLLER listener
    client_advertised: int  # what clients and brokers dial: the proxy port, or ``client``
    controller_advertised: int
    # Client listeners beside PLAINTEXT: name -> port (not proxied), e.g. {"SSL": 9093}.
    extra: dict[str, int] = field(default_factory=dict)
    internal: int = 0  # with an authorizer: the INTERNAL (SASL_PLAINTEXT) inter-broker listener


def authorizer_settings() -> dict[str, str]:
    """With an authorizer, as the single-node reference (``ApacheKafka(authorizer=True)``): the nodes'
    own traffic (replication and other inter-broker requests on INTERNAL, the quorum and broker
    registrations on CONTROLLER) is SASL/PLAIN as INTERNAL_PRINCIPAL, a super user."""
    return internal_sasl_settings(controller=True)


class KafkaClusterNode(ApacheKafka):
    """One combined broker+controller of an ``ApacheKafkaCluster``; ports fixed for its lifetime."""

    def __init__(
        self,
        workdir: Path,
        node_id: int,
        ports: NodePorts,
        voters: str,
        cluster_id: str,
        overrides: dict[str, str],
        jvm: JvmProfile,
        extra_protocols: dict[str, str] | None = None,
        authorizer: bool = False,
        log_dirs: int = 1,
    ) -> None:
        super().__init__(
            workdir, port=ports.client, overrides=overrides, jvm=jvm, authorizer=authorizer, log_dirs=log_dirs
        )
        self.extra_protocols = dict(extra_protocols or {})  # listener name -> security protocol
        self.node_id = node_id
        self.ports = ports
        self.voters = voters
        self.cluster_id = cluster_id
        self.port = ports.client
        self.controller_port = ports.controller
        self.bootstrap = f"127.0.0.1:{ports.client_advertised}"
        self.frozen = False

    def _write_config(self) -> Path:
        ports = self.ports
        extra_ports = dict(ports.extra)
        protocols = dict(self.extra_protocols)
        controller_protocol = "PLAINTEXT"
        if self.authorizer:
            extra_ports["INTERNAL"] = ports.internal
            protocols["INTERNAL"] = controller_protocol = "SASL_PLAINTEXT"
        extra = "".join(f",{name}://127.0.0.1:{port}" for name, port in extra_ports.items())
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{ports.client},CONTROLLER://127.0.0.1:{ports.controller}{extra}",
            "advertised.listeners": (
                f"PLAINTEXT://127.0.0.1:{ports.client_advertised},"
                f"CONTROLLER://127.0.0.1:{ports.controller_advertised}{extra}"
            ),
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": (
                f"PLAINTEXT:PLAINTEXT,CONTROLLER:{controller_protocol}"
                + "".join(f",{name}:{protocol}" for name, protocol in protocols.items())
            ),
            "log.dirs": ",".join(str(d) for d in self.log_dirs),
            **CLUSTER_SETTINGS,
            **(authorizer_settings() if self.authorizer else {}),
            **self.overrides,
        }
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return config

    def launch(self) -> None:
        """Format (first time only) and start the JVM; does not wait (a quorum needs its peers)."""
        if self.is_running():
            raise RuntimeError(f"node {self.node_id} already running as pid {self.pid}")
        self._process = None
        classpath = install()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        self._format(classpath, config)
        self._launch(classpath, config)
        self.frozen = False
        logger.info("Kafka node %d pid %d launched", self.node_id, self.pid)

    def serving(self) -> bool:
        """This node answers Metadata on its real port and lists itself (registered and unfenced)."""
        try:
            return self.node_id in broker_ids("127.0.0.1", self.ports.client, timeout_s=2.0)
        except ProbeErrors:
            return False

    def start(self, timeout_s: float = 120) -> str:
        self.launch()
        self.wait_serving(timeout_s)
        return self.bootstrap

    def wait_serving(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_running():
                raise ApacheKafkaError(f"Kafka node {self.node_id} exited:\n{self._log_tail()}")
            if self.serving():
                return
            self._process_exit_or_timeout(0.2)  # poll interval while the JVM boots
        raise ApacheKafkaError(f"Kafka node {self.node_id} not serving in {timeout_s}s:\n{self._log_tail()}")

    # ---- faults, by pid ------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no controlled shutdown."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait(30)
        self.frozen = False
        self._process = None

    def terminate(self, timeout_s: float = 60) -> None:
        """SIGTERM: Kafka's controlled shutdown, then exit (SIGKILL after ``timeout_s``)."""
        if self.frozen:
            self.thaw()
        self.stop(timeout_s)

    def freeze(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        if self._process is not None and self._process.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
        self.frozen = False

    def quorum_state(self) -> dict[str, int] | None:
        """This node's view of the KRaft quorum leader (its ``quorum-state`` file)."""
        path = self.data_dir / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return {"leader_id": int(state.get("leaderId", -1)), "leader_epoch": int(state.get("leaderEpoch", -1))}


class ApacheKafkaCluster:
    """N combined KRaft nodes on 127.0.0.1, optionally behind fault-injecting proxies."""

    kind = "kafka-cluster"

    def __init__(
        self,
        workdir: Path,
        nodes: int = 3,
        overrides: dict[str, str] | None = None,
        jvm: JvmProfile = CLUSTER_JVM,
        proxied: bool = False,
        extra_listeners: dict[str, str] | None = None,
        authorizer: bool = False,
        log_dirs: int = 1,
    ) -> None:
        self.workdir = Path(workdir)
        self.size = nodes
        self.overrides = dict(overrides or {})
        self.jvm = jvm
        self.log_dirs_per_node = log_dirs  # more than 1: AlterReplicaLogDirs moves between a node's dirs
        self.proxied = proxied
        # Client listeners beside PLAINTEXT, name -> security protocol (their settings come with the
        # overrides, e.g. listener.name.<name>.ssl.*); each node gets its own port of each.
        self.extra_listeners = dict(extra_listeners or {})
        # StandardAuthorizer, the nodes' own traffic a super user's (authorizer_settings).
        self.authorizer = authorizer
        if proxied and (self.extra_listeners or authorizer):
            raise ValueError("extra listeners and the authorizer are not behind the fault proxies")
        self.nodes: dict[int, KafkaClusterNode] = {}
        self.proxies: FaultProxies | None = None
        self.bootstrap = ""

    def _allocate(self) -> dict[int, NodePorts]:
        taken: set[int] = set()

        def fresh() -> int:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            return port

        ports = {}
        for node_id in range(1, self.size + 1):
            client, controller = fresh(), fresh()
            if self.proxied:
                ports[node_id] = NodePorts(client, controller, fresh(), fresh())
            else:
                extra = {name: fresh() for name in self.extra_listeners}
                internal = fresh() if self.authorizer else 0
                ports[node_id] = NodePorts(client, controller, client, controller, extra, internal)
        return ports

    def start(self, timeout_s: float = 180) -> str:
        if self.nodes:
            raise RuntimeError("already started")
        install()
        ports = self._allocate()
        voters = ",".join(f"{n}@127.0.0.1:{p.controller_advertised}" for n, p in ports.items())
        cluster_id = random_kafka_uuid()
        for node_id, node_ports in ports.items():
            self.nodes[node_id] = KafkaClusterNode(
                self.workdir / f"node{node_id}", node_id, node_ports, voters, cluster_id, self.overrides,
                self.jvm, self.extra_listeners, self.authorizer, self.log_dirs_per_node,
            )  # fmt: skip
        if self.proxied:
            routes = []
            for node_id, p in ports.items():
                routes.append(Route(node_id, p.client_advertised, p.client))
                routes.append(Route(node_id, p.controller_advertised, p.controller))
            self.proxies = FaultProxies(routes)
            self.proxies.start()
        try:
            for node in self.nodes.values():
                node.launch()
            self._update_proxy_pids()
            self.wait_all_serving(timeout_s)
        except BaseException:
            self.stop()
            raise
        self.bootstrap = ",".join(node.bootstrap for node in self.nodes.values())
        logger.info("Apache Kafka cluster of %d ready at %s", self.size, self.bootstrap)
        return self.bootstrap

    def listener_ports(self, listener: str) -> list[int]:
        """Every node's port of a listener, by node id ("PLAINTEXT": the advertised client ports)."""
        if listener == "PLAINTEXT":
            return [self.nodes[n].ports.client_advertised for n in sorted(self.nodes)]
        return [self.nodes[n].ports.extra[listener] for n in sorted(self.nodes)]

    def listener_bootstrap(self, listener: str) -> str:
        """Bootstrap through the whole cluster on one listener."""
        return ",".join(f"127.0.0.1:{port}" for port in self.listener_ports(listener))

    def wait_all_serving(self, timeout_s: float = 180) -> None:
        """Until every node lists every node as an unfenced broker."""
        deadline = time.monotonic() + timeout_s
        want = set(self.nodes)
        while time.monotonic() < deadline:
            for node in self.nodes.values():
                if not node.is_running():
                    raise ApacheKafkaError(f"Kafka node {node.node_id} exited:\n{node._log_tail()}")
            try:
                if all(broker_ids("127.0.0.1", n.ports.client) >= want for n in self.nodes.values()):
                    return
            except ProbeErrors:
                pass
            time.sleep(0.3)  # poll interval of the readiness check
        raise ApacheKafkaError(f"Kafka cluster not serving all of {sorted(want)} within {timeout_s}s")

    def _update_proxy_pids(self) -> None:
        if self.proxies is not None:
            self.proxies.set_pids({n: node.pid for n, node in self.nodes.items() if node.is_running()})

    # ---- the fault interface the failure harness uses (pybroker's cluster adapter has the same) ----
    def node_ids(self) -> list[int]:
        return sorted(self.nodes)

    def pid(self, node_id: int) -> int:
        return self.nodes[node_id].pid

    def is_running(self, node_id: int) -> bool:
        return self.nodes[node_id].is_running()

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def terminate(self, node_id: int) -> None:
        self.nodes[node_id].terminate()

    def freeze(self, node_id: int) -> None:
        self.nodes[node_id].freeze()

    def is_frozen(self, node_id: int) -> bool:
        return self.nodes[node_id].frozen

    def observer_port(self, node_id: int) -> int:
        """The node's real client port, past its fault proxy: where a harness observes it from."""
        return self.nodes[node_id].ports.client

    def thaw(self, node_id: int) -> None:
        self.nodes[node_id].thaw()

    def restart(self, node_id: int, timeout_s: float = 120) -> None:
        """Start a stopped or killed node on its data and wait until it serves again."""
        node = self.nodes[node_id]
        node.launch()
        self._update_proxy_pids()
        node.wait_serving(timeout_s)

    def isolate(self, node_id: int) -> None:
        if self.proxies is None:
            raise RuntimeError("network cuts need the cluster started with proxied=True")
        self.proxies.isolate(node_id)

    def heal(self, node_id: int) -> None:
        if self.proxies is None:
            raise RuntimeError("network cuts need the cluster started with proxied=True")
        self.proxies.heal(node_id)

    @property
    def session_timeout_s(self) -> float:
        """broker.session.timeout.ms: how long the quorum keeps a silent broker unfenced (leading)."""
        return int(self.overrides.get("broker.session.timeout.ms", 9000)) / 1000

    def data_dir(self, node_id: int) -> Path:
        """The node's log.dirs."""
        return self.nodes[node_id].data_dir

    def log_dirs(self, node_id: int) -> list[Path]:
        """Every log dir of the node, as configured (log.dirs)."""
        return list(self.nodes[node_id].log_dirs)

    def active_controller(self) -> tuple[int, int]:
        """(node id, epoch) of the KRaft quorum leader, from the nodes' quorum-state files (the newest
        epoch any node has recorded)."""
        best = (-1, -1)
        for node in self.nodes.values():
            state = node.quorum_state()
            if state and state["leader_id"] >= 0 and state["leader_epoch"] > best[1]:
                best = (state["leader_id"], state["leader_epoch"])
        return best

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM to every node at once (one by one, the last ones would wait on a quorum already
        gone for their controlled shutdown), then wait; SIGKILL what is left after ``timeout_s``."""
        running = [node for node in self.nodes.values() if node.is_running()]
        for node in running:
            node.thaw()
            os.kill(node.pid, signal.SIGTERM)
        for node in running:
            try:
                node.stop(timeout_s)
            except Exception:  # stop the rest whatever one node does
                logger.exception("stopping Kafka node %d", node.node_id)
        if self.proxies is not None:
            self.proxies.stop()
            self.proxies = None

    def __enter__(self) -> ApacheKafkaCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="python -m compat_tests.reference.kafka_cluster")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="start the cluster in the foreground; prints the bootstrap")
    run.add_argument("--dir", type=Path, required=True)
    run.add_argument("--nodes", type=int, default=3)
    run.add_argument("--proxied", action="store_true", help="advertise fault-proxy ports")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    overrides = dict(pair.split("=", 1) for pair in args.set)
    cluster = ApacheKafkaCluster(args.dir, nodes=args.nodes, overrides=overrides, proxied=args.proxied)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    try:
        print(cluster.start(), flush=True)
        while not stopping.wait(1.0):
            pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
