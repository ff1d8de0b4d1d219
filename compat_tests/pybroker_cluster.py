"""A local pybroker cluster: one ZooKeeper plus N ``python -m pybroker serve`` brokers on loopback.

The same interface as ``compat_tests.reference.kafka_cluster.ApacheKafkaCluster`` (start/stop,
``bootstrap``, ``node_ids``, kill/terminate/freeze/thaw/restart by node id, isolate/heal through the
fault proxies, ``active_controller``), so the compat suite (``--broker pybroker-cluster``) and the failure
harness (``python -m tools.chaos --cluster pybroker``) run against either unchanged.

Each broker gets ``zookeeper.connect``, ``broker.id``, its own ``log.dirs`` and a PLAINTEXT listener on
127.0.0.1; with ``proxied=True`` its ``advertised.listeners`` is a fault-proxy port in front of it, and
ZooKeeper sits behind a proxy too, so ``isolate(node)`` also cuts the broker's ZooKeeper session.

``extra_listeners`` adds client listeners (SSL, SASL_PLAINTEXT, SASL_SSL ...) with a port of each on
every broker; ``authorizer`` turns the authorizer on with the brokers' own traffic on an INTERNAL
SASL_PLAINTEXT listener as a super user (``authorizer_settings``), as the Kafka reference does.

What waits on cluster mode (issue 11): ZooKeeper comes from ``pybroker.controller.zookeeper_server``
(branch h/zk), and ``active_controller`` reads the ``/controller`` and ``/controller_epoch`` znodes
Kafka's ZooKeeper mode defines, through kazoo.  Until both exist, ``start()`` raises
``ClusterModeUnavailable`` naming what is missing: never a silent single broker.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from compat_tests.brokers import PyBroker, free_port
from compat_tests.reference.fault_proxy import FaultProxies, Route
from compat_tests.reference.kafka_probe import ProbeError, broker_ids

logger = logging.getLogger(__name__)

ZOOKEEPER_NODE = 0  # the fault proxies' owner id of ZooKeeper's route
DEFAULT_SESSION_TIMEOUT_MS = 18000  # pybroker's (and Kafka's ZooKeeper mode's) zookeeper.session.timeout.ms

# The cluster defaults of the issue-11 harness, Kafka's key names (the same as the Kafka reference's).
CLUSTER_SETTINGS: dict[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}


def authorizer_settings() -> dict[str, str]:
    """With an authorizer, as Kafka's (``kafka_cluster.authorizer_settings``): the brokers reach each
    other on INTERNAL (SASL_PLAINTEXT, PLAIN) as INTERNAL_PRINCIPAL, a super user, so replication and the
    other inter-broker requests never depend on the ACLs clients make; PLAINTEXT clients stay
    User:ANONYMOUS."""
    from compat_tests.reference.apache_kafka import internal_sasl_settings

    return internal_sasl_settings(controller=False)


class ClusterModeUnavailable(RuntimeError):
    """This checkout has no cluster mode yet (no ZooKeeper launcher, or brokers refuse zookeeper.connect)."""


class PyBrokerCluster:
    kind = "pybroker-cluster"

    def __init__(
        self,
        workdir: Path,
        nodes: int = 3,
        overrides: dict[str, str] | None = None,
        proxied: bool = False,
        extra_listeners: dict[str, str] | None = None,
        authorizer: bool = False,
        log_dirs: int = 1,
    ) -> None:
        self.workdir = Path(workdir)
        self.size = nodes
        self.overrides = dict(overrides or {})
        self.proxied = proxied
        self.log_dirs_per_node = log_dirs  # more than 1: AlterReplicaLogDirs moves between a node's dirs
        # Client listeners beside PLAINTEXT, name -> security protocol (their settings come with the
        # overrides, e.g. listener.name.<name>.ssl.*); each node gets its own port of each.
        self.extra_listeners = dict(extra_listeners or {})
        self.extra_ports: dict[int, dict[str, int]] = {}
        # An authorizer, the brokers' own traffic a super user's (authorizer_settings).
        self.authorizer = authorizer
        if proxied and (self.extra_listeners or authorizer):
            raise ValueError("extra listeners and the authorizer are not behind the fault proxies")
        self.nodes: dict[int, PyBroker] = {}
        self.advertised: dict[int, int] = {}
        self.zookeeper: Any = None
        self.proxies: FaultProxies | None = None
        self.bootstrap = ""
        self.frozen: set[int] = set()
        self._observer: Any = None  # the harness's own ZooKeeper session (active_controller)

    @property
    def session_timeout_s(self) -> float:
        """zookeeper.session.timeout.ms: how long a dead or silent broker keeps its registration."""
        return int(self.overrides.get("zookeeper.session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS)) / 1000

    def data_dir(self, node_id: int) -> Path:
        """The broker's log.dirs."""
        return self.nodes[node_id].data_dir

    def log_dirs(self, node_id: int) -> list[Path]:
        """Every log dir of the broker, as configured (log.dirs)."""
        return list(self.nodes[node_id].log_dirs)

    def _zookeeper(self) -> Any:
        try:
            from pybroker.controller.zookeeper_server import ZooKeeperServer  # type: ignore[import-not-found]
        except ImportError as error:
            raise ClusterModeUnavailable(
                "pybroker cluster mode is not in this checkout: pybroker.controller.zookeeper_server is "
                f"missing ({error})"
            ) from error
        return ZooKeeperServer(self.workdir / "zookeeper", free_port())

    def start(self, timeout_s: float = 120) -> str:
        if self.nodes:
            raise RuntimeError("already started")
        self.zookeeper = self._zookeeper()
        self.zookeeper.start()
        zk_port = self.zookeeper.port
        routes = []
        real = {node_id: free_port() for node_id in range(1, self.size + 1)}
        for node_id, port in real.items():
            self.advertised[node_id] = free_port() if self.proxied else port
            routes.append(Route(node_id, self.advertised[node_id], port))
        if self.proxied:
            zk_proxy = free_port()
            routes.append(Route(ZOOKEEPER_NODE, zk_proxy, zk_port))
            self.proxies = FaultProxies(routes)
            self.proxies.start()
            zk_port = zk_proxy
        for node_id, port in real.items():
            listeners = dict(self.extra_listeners)
            self.extra_ports[node_id] = {name: free_port() for name in listeners}
            if self.authorizer:
                listeners["INTERNAL"] = "SASL_PLAINTEXT"
                self.extra_ports[node_id]["INTERNAL"] = free_port()
            extra = "".join(f",{name}://127.0.0.1:{p}" for name, p in self.extra_ports[node_id].items())
            settings = {
                "zookeeper.connect": f"127.0.0.1:{zk_port}",
                "broker.id": str(node_id),
                "listeners": f"PLAINTEXT://127.0.0.1:{port}{extra}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.advertised[node_id]}{extra}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"
                + "".join(f",{name}:{protocol}" for name, protocol in listeners.items()),
                **CLUSTER_SETTINGS,
                **(authorizer_settings() if self.authorizer else {}),
                **self.overrides,
            }
            self.nodes[node_id] = PyBroker(
                self.workdir / f"broker{node_id}", port=port, overrides=settings, log_dirs=self.log_dirs_per_node
            )
        try:
            for node_id in self.nodes:
                self.restart(node_id, timeout_s)
            self.wait_all_serving(timeout_s)
        except BaseException:
            self.stop()
            raise
        self.bootstrap = ",".join(f"127.0.0.1:{self.advertised[n]}" for n in sorted(self.nodes))
        return self.bootstrap

    def listener_ports(self, listener: str) -> list[int]:
        """Every broker's port of a listener, by broker id ("PLAINTEXT": the advertised client ports)."""
        if listener == "PLAINTEXT":
            return [self.advertised[n] for n in sorted(self.nodes)]
        return [self.extra_ports[n][listener] for n in sorted(self.nodes)]

    def listener_bootstrap(self, listener: str) -> str:
        """Bootstrap through the whole cluster on one listener."""
        return ",".join(f"127.0.0.1:{port}" for port in self.listener_ports(listener))

    def wait_all_serving(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        want = set(self.nodes)
        while time.monotonic() < deadline:
            try:
                if all(broker_ids("127.0.0.1", b.port) >= want for b in self.nodes.values()):
                    return
            except (OSError, ProbeError, ValueError):
                pass
            time.sleep(0.3)  # poll interval of the readiness check
        raise ClusterModeUnavailable(
            f"the pybroker brokers never all listed {sorted(want)} in Metadata within {timeout_s}s: "
            "cluster mode (broker registration in ZooKeeper) is missing or broken"
        )

    def _update_proxy_pids(self) -> None:
        if self.proxies is not None:
            pids = {n: b.pid for n, b in self.nodes.items() if b.pid and b.process and b.process.poll() is None}
            if self.zookeeper is not None and self.zookeeper.pid:
                pids[ZOOKEEPER_NODE] = self.zookeeper.pid
            self.proxies.set_pids(pids)

    # ---- the fault interface (as ApacheKafkaCluster) ----------------------------------------------
    def node_ids(self) -> list[int]:
        return sorted(self.nodes)

    def pid(self, node_id: int) -> int:
        pid = self.nodes[node_id].pid
        if pid is None:
            raise RuntimeError(f"broker {node_id} is not running")
        return pid

    def is_running(self, node_id: int) -> bool:
        process = self.nodes[node_id].process
        return process is not None and process.poll() is None

    def kill(self, node_id: int) -> None:
        self.frozen.discard(node_id)
        self.nodes[node_id].kill9()

    def terminate(self, node_id: int) -> None:
        self.thaw(node_id)
        self.nodes[node_id].stop()

    def freeze(self, node_id: int) -> None:
        os.kill(self.pid(node_id), signal.SIGSTOP)
        self.frozen.add(node_id)

    def is_frozen(self, node_id: int) -> bool:
        return node_id in self.frozen

    def observer_port(self, node_id: int) -> int:
        """The node's real client port, past its fault proxy: where a harness observes it from."""
        return self.nodes[node_id].port

    def thaw(self, node_id: int) -> None:
        if node_id in self.frozen and self.is_running(node_id):
            os.kill(self.pid(node_id), signal.SIGCONT)
        self.frozen.discard(node_id)

    def restart(self, node_id: int, timeout_s: float = 120) -> None:
        self.nodes[node_id].start(timeout_s)
        self._update_proxy_pids()

    def isolate(self, node_id: int) -> None:
        if self.proxies is None:
            raise RuntimeError("network cuts need the cluster started with proxied=True")
        self.proxies.isolate(node_id)

    def heal(self, node_id: int) -> None:
        if self.proxies is None:
            raise RuntimeError("network cuts need the cluster started with proxied=True")
        self.proxies.heal(node_id)

    def active_controller(self) -> tuple[int, int]:
        """(broker id, controller epoch) from the /controller and /controller_epoch znodes, read through
        one session of the harness's own, straight to ZooKeeper (past its proxy)."""
        from kazoo.client import KazooClient  # type: ignore[import-not-found]
        from kazoo.exceptions import NoNodeError  # type: ignore[import-not-found]

        if self._observer is None:
            self._observer = KazooClient(hosts=self.zookeeper.connect_string, timeout=10)
            self._observer.start(timeout=10)
        try:
            controller, _ = self._observer.get("/controller")
        except NoNodeError:
            return -1, -1  # between the old controller's session and the next election
        epoch, _ = self._observer.get("/controller_epoch")
        return int(json.loads(controller)["brokerid"]), int(epoch)

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.close()
            self._observer = None
        for node_id in self.nodes:
            self.thaw(node_id)
            self._note_early_exit(node_id)
            if self.is_running(node_id):
                self.nodes[node_id].process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        for broker in self.nodes.values():
            broker.stop()
        if self.zookeeper is not None:
            self.zookeeper.stop()
        if self.proxies is not None:
            self.proxies.stop()
            self.proxies = None

    def _note_early_exit(self, node_id: int) -> None:
        """A node that is gone before stop() (killed by a test, or died on its own) gets its exit code at
        the end of its log: a negative code is the signal, which the log itself cannot say."""
        process = self.nodes[node_id].process
        if process is not None and process.poll() is not None:
            with open(self.nodes[node_id].log_path, "a") as log_file:
                log_file.write(f"-- [compat harness] pid {process.pid} had exited with code {process.returncode}\n")

    def __enter__(self) -> PyBrokerCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
