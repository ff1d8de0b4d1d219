"""The Prometheus exposition: turns the request path's running totals and a snapshot of broker state
into the text format when the endpoint is scraped.

Names follow what the Prometheus JMX exporter's stock Kafka rules make of Kafka's MBeans
(``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=T`` becomes
``kafka_server_brokertopicmetrics_bytesin_total{topic="T"}``), so dashboards written for Apache
Kafka find the same series here; consumer lag uses kafka_exporter's names (``kafka_consumergroup_lag``),
which is what people run next to Kafka to get it.  Things Kafka has no name for are ``pybroker_*``.

The text is written directly rather than through prometheus_client's metric objects: a scrape runs
on the event loop, and with thousands of partitions (eight series each) building a Sample object per
series took hundreds of milliseconds; formatting strings takes a small fraction of that (measured:
docs/OBSERVABILITY.md).  prometheus_client still renders its process, platform and GC collectors.
"""

from __future__ import annotations

from collections import Counter

from pybroker.metrics.lag import consumer_lag
from pybroker.metrics.recorder import BrokerMetrics, Histogram
from pybroker.metrics.view import ClusterView
from pybroker.protocol.api import API_NAMES


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels(**kv: str) -> str:
    if not kv:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in kv.items()) + "}"


class Family:
    """One metric family's HELP/TYPE header and sample lines."""

    __slots__ = ("name", "kind", "doc", "lines")

    def __init__(self, name: str, kind: str, doc: str) -> None:
        self.name = name  # counters: including the _total suffix
        self.kind = kind
        self.doc = doc
        self.lines: list[str] = []

    def add(self, label_text: str, value: float) -> None:
        self.lines.append(f"{self.name}{label_text} {value}")

    def add_histogram(self, label_pairs: str, h: Histogram) -> None:
        """``label_pairs``: the labels without braces (``a="x",b="y"``), or ""."""
        sep = "," if label_pairs else ""
        running = 0
        for bound, n in zip(h.bounds, h.buckets, strict=False):
            running += n
            self.lines.append(f'{self.name}_bucket{{{label_pairs}{sep}le="{bound!r}"}} {running}')
        self.lines.append(f'{self.name}_bucket{{{label_pairs}{sep}le="+Inf"}} {h.count}')
        braces = f"{{{label_pairs}}}" if label_pairs else ""
        self.lines.append(f"{self.name}_count{braces} {h.count}")
        self.lines.append(f"{self.name}_sum{braces} {h.sum!r}")

    def render(self, out: list[str]) -> None:
        doc = self.doc.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {self.name} {doc}")
        out.append(f"# TYPE {self.name} {self.kind}")
        out.extend(self.lines)


def gauge(name: str, doc: str, value: float | None = None) -> Family:
    f = Family(name, "gauge", doc)
    if value is not None:
        f.add("", value)
    return f


def counter(name: str, doc: str) -> Family:
    return Family(name + "_total", "counter", doc)


class BrokerCollector:
    def __init__(self, view: ClusterView, recorder: BrokerMetrics, version: str = "") -> None:
        self.view = view
        self.recorder = recorder
        self.version = version

    def render(self) -> str:
        out: list[str] = []
        for part in (self._broker, self._topics, self._requests, self._partitions, self._groups, self._telemetry):
            for family in part():
                family.render(out)
        out.append("")
        return "\n".join(out)

    # -- the broker ---------------------------------------------------------------------------------
    def _broker(self) -> list[Family]:
        v = self.view
        r = self.recorder
        info = gauge("pybroker_info", "This broker process.")
        info.add(labels(cluster_id=v.cluster_id, node_id=str(v.node_id), version=self.version), 1)
        open_, queued, in_flight = v.connection_counts()
        listener = labels(listener=v.listener)
        conns = gauge("kafka_server_socketservermetrics_connection_count", "Open client connections.")
        conns.add(listener, open_)
        created = counter(
            "kafka_server_socketservermetrics_connection_creation", "Client connections accepted."
        )
        created.add(listener, r.connections_created)
        closed = counter("kafka_server_socketservermetrics_connection_close", "Client connections closed.")
        closed.add(listener, r.connections_closed)
        loop_lag = Family(
            "pybroker_event_loop_lag_seconds",
            "histogram",
            "How late the event loop runs a timer, sampled twice a second.",
        )
        loop_lag.add_histogram("", r.loop_lag)
        return [
            info,
            gauge(
                "kafka_controller_kafkacontroller_activecontrollercount",
                "1 when this node is the active controller (a single pybroker always is).",
                1 if v.controller_id() == v.node_id else 0,
            ),
            conns,
            created,
            closed,
            gauge(
                "kafka_network_requestchannel_requestqueuesize",
                "Requests read from sockets and waiting behind an earlier request of the same connection.",
                queued,
            ),
            gauge(
                "pybroker_requests_in_flight",
                "Requests being handled that wait for something (long-poll fetch, acks=all, a group join).",
                in_flight,
            ),
            loop_lag,
            gauge(
                "pybroker_event_loop_lag_last_seconds", "The latest event-loop lag sample.", r.loop_lag_last
            ),
        ]

    # -- client telemetry (KIP-714) -------------------------------------------------------------------
    def _telemetry(self) -> list[Family]:
        accepted, latest = self.view.client_telemetry()
        pushes = counter("pybroker_client_telemetry_pushes", "PushTelemetry requests accepted (KIP-714).")
        pushes.add("", accepted)
        values = gauge(
            "pybroker_client_telemetry_metric",
            "The latest value each client instance pushed for each of its metrics (gauges and sums).",
        )
        for push in latest:
            for name, value in push.metrics:
                if value is not None:
                    values.add(
                        labels(client_instance_id=str(push.client_instance_id), client_id=push.client_id,
                               metric=name),
                        value,
                    )
        return [pushes, values]

    # -- per topic ----------------------------------------------------------------------------------
    def _topics(self) -> list[Family]:
        topics = self.view.topics()
        self.recorder.forget_topics_except({t.name for t in topics})
        families = {
            "bytes_in": counter("kafka_server_brokertopicmetrics_bytesin", "Bytes appended by producers."),
            "messages_in": counter(
                "kafka_server_brokertopicmetrics_messagesin", "Records appended by producers."
            ),
            "bytes_out": counter(
                "kafka_server_brokertopicmetrics_bytesout", "Record bytes sent to consumers."
            ),
            "produce_requests": counter(
                "kafka_server_brokertopicmetrics_totalproducerequests",
                "Produce requests per topic (one per partition written).",
            ),
            "failed_produce_requests": counter(
                "kafka_server_brokertopicmetrics_failedproducerequests",
                "Produce requests per topic that failed.",
            ),
        }
        for name, st in sorted(self.recorder.topics.items()):
            topic = labels(topic=name)
            for attr, family in families.items():
                family.add(topic, getattr(st, attr))
        return [
            *families.values(),
            gauge("kafka_controller_kafkacontroller_globaltopiccount", "Topics in the cluster.", len(topics)),
        ]

    # -- per API ------------------------------------------------------------------------------------
    def _requests(self) -> list[Family]:
        total = counter("kafka_network_requestmetrics_requests", "Requests handled, by API and version.")
        latency = Family(
            "kafka_network_requestmetrics_totaltime_seconds",
            "histogram",
            "Time from a request's dispatch until its response is ready, including any wait "
            "(long-poll fetch, acks=all), by API and version.",
        )
        for (api_key, version), h in sorted(self.recorder.requests.items()):
            pairs = f'request="{_escape(API_NAMES.get(api_key, str(api_key)))}",version="{version}"'
            total.add("{" + pairs + "}", h.count)
            latency.add_histogram(pairs, h)
        return [total, latency]

    # -- per partition ------------------------------------------------------------------------------
    def _partitions(self) -> list[Family]:
        start = gauge("kafka_log_log_logstartoffset", "The first offset still in the partition's log.")
        end = gauge("kafka_log_log_logendoffset", "The offset the next appended record gets.")
        hw = gauge(
            "kafka_cluster_partition_highwatermark", "The high watermark: what consumers may read up to."
        )
        size = gauge("kafka_log_log_size", "Bytes of the partition's segment files.")
        segments = gauge("kafka_log_log_numlogsegments", "Segments of the partition's log.")
        under = gauge(
            "kafka_cluster_partition_underreplicated", "1 when the ISR is smaller than the replica set."
        )
        isr = gauge("kafka_cluster_partition_insyncreplicascount", "In-sync replicas of the partition.")
        replicas = gauge("kafka_cluster_partition_replicascount", "Replicas of the partition.")
        parts = self.view.partitions()
        node = self.view.node_id
        topic_labels: dict[str, str] = {}
        for p in parts:
            prefix = topic_labels.get(p.topic)
            if prefix is None:
                prefix = topic_labels[p.topic] = '{topic="' + _escape(p.topic) + '",partition="'
            key = f'{prefix}{p.partition}"}} '
            start.lines.append(start.name + key + str(p.log_start_offset))
            end.lines.append(end.name + key + str(p.log_end_offset))
            hw.lines.append(hw.name + key + str(p.high_watermark))
            size.lines.append(size.name + key + str(p.size_bytes))
            segments.lines.append(segments.name + key + str(p.segments))
            under.lines.append(under.name + key + ("1" if p.under_replicated else "0"))
            isr.lines.append(isr.name + key + str(len(p.isr)))
            replicas.lines.append(replicas.name + key + str(len(p.replicas)))
        return [
            start,
            end,
            hw,
            size,
            segments,
            under,
            isr,
            replicas,
            gauge("kafka_server_replicamanager_partitioncount", "Partitions on this broker.", len(parts)),
            gauge(
                "kafka_server_replicamanager_leadercount",
                "Partitions this broker leads.",
                sum(1 for p in parts if p.leader == node),
            ),
            gauge(
                "kafka_server_replicamanager_underreplicatedpartitions",
                "Partitions led here whose ISR is smaller than their replica set.",
                sum(1 for p in parts if p.leader == node and p.under_replicated),
            ),
            gauge(
                "kafka_controller_kafkacontroller_offlinepartitionscount",
                "Partitions without a leader.",
                sum(1 for p in parts if p.offline),
            ),
            gauge(
                "kafka_controller_kafkacontroller_globalpartitioncount",
                "Partitions in the cluster.",
                len(parts),
            ),
        ]

    # -- groups -------------------------------------------------------------------------------------
    def _groups(self) -> list[Family]:
        groups = self.view.groups()
        by_state = gauge(
            "kafka_coordinator_group_groupmetadatamanager_numgroups", "Groups by state and type."
        )
        for (group_state, kind), n in sorted(Counter((g.state, g.group_type) for g in groups).items()):
            by_state.add(labels(state=group_state, type=kind), n)
        state = gauge(
            "kafka_consumergroup_state",
            "1 for the group's current state (Empty, Stable, PreparingRebalance, ...).",
        )
        members = gauge("kafka_consumergroup_members", "Members of the group.")
        for g in groups:
            state.add(labels(consumergroup=g.group_id, state=g.state, type=g.group_type), 1)
            members.add(labels(consumergroup=g.group_id), len(g.members))
        current = gauge("kafka_consumergroup_current_offset", "The group's committed offset.")
        lag = gauge(
            "kafka_consumergroup_lag",
            "High watermark minus the group's committed offset (what kafka-consumer-groups shows as LAG).",
        )
        lag_sum = gauge("kafka_consumergroup_lag_sum", "The group's lag summed over a topic's partitions.")
        sums: Counter[tuple[str, str]] = Counter()
        for row in consumer_lag(self.view, [g.group_id for g in groups]):
            key = labels(consumergroup=row.group_id, topic=row.topic, partition=str(row.partition))
            current.add(key, row.committed_offset)
            lag.add(key, row.lag)
            sums[(row.group_id, row.topic)] += row.lag
        for (group_id, topic), total in sorted(sums.items()):
            lag_sum.add(labels(consumergroup=group_id, topic=topic), total)
        return [by_state, state, members, current, lag, lag_sum]
