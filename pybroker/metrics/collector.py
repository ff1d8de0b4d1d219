"""The Prometheus collector: turns the request path's running totals and a snapshot of broker state
into metric families when the endpoint is scraped.

Names follow what the Prometheus JMX exporter's stock Kafka rules make of Kafka's MBeans
(``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=T`` becomes
``kafka_server_brokertopicmetrics_bytesin_total{topic="T"}``), so dashboards written for Apache
Kafka find the same series here; consumer lag uses kafka_exporter's names (``kafka_consumergroup_lag``),
which is what people run next to Kafka to get it.  Things Kafka has no name for are ``pybroker_*``.
Nothing here runs on the request path: ``collect`` is called by the HTTP handler on the event loop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from pybroker.metrics.lag import consumer_lag
from pybroker.metrics.recorder import BrokerMetrics, Histogram
from pybroker.metrics.view import ClusterView
from pybroker.protocol.api import API_NAMES


def _api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, str(api_key))


def _buckets(h: Histogram) -> list[tuple[str, float]]:
    out = []
    running = 0
    for bound, n in zip((*h.bounds, float("inf")), h.buckets, strict=True):
        running += n
        out.append(("+Inf" if bound == float("inf") else repr(bound), running))
    return out


class BrokerCollector:
    def __init__(self, view: ClusterView, recorder: BrokerMetrics, version: str = "") -> None:
        self.view = view
        self.recorder = recorder
        self.version = version

    def collect(self) -> Iterator[Metric]:
        yield from self._broker()
        yield from self._topics()
        yield from self._requests()
        yield from self._partitions()
        yield from self._groups()

    # -- the broker ---------------------------------------------------------------------------------
    def _broker(self) -> Iterator[Metric]:
        v = self.view
        info = InfoMetricFamily("pybroker", "This broker process.")
        info.add_metric([], {"cluster_id": v.cluster_id, "node_id": str(v.node_id), "version": self.version})
        yield info
        active = GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 when this node is the active controller (a single pybroker always is).",
        )
        active.add_metric([], 1 if v.controller_id() == v.node_id else 0)
        yield active
        open_, queued, in_flight = v.connection_counts()
        r = self.recorder
        listener = [v.listener]
        conns = GaugeMetricFamily(
            "kafka_server_socketservermetrics_connection_count",
            "Open client connections.",
            labels=["listener"],
        )
        conns.add_metric(listener, open_)
        yield conns
        created = CounterMetricFamily(
            "kafka_server_socketservermetrics_connection_creation",
            "Client connections accepted.",
            labels=["listener"],
        )
        created.add_metric(listener, r.connections_created)
        yield created
        closed = CounterMetricFamily(
            "kafka_server_socketservermetrics_connection_close",
            "Client connections closed.",
            labels=["listener"],
        )
        closed.add_metric(listener, r.connections_closed)
        yield closed
        yield GaugeMetricFamily(
            "kafka_network_requestchannel_requestqueuesize",
            "Requests read from sockets and waiting behind an earlier request of the same connection.",
            value=queued,
        )
        yield GaugeMetricFamily(
            "pybroker_requests_in_flight",
            "Requests being handled that wait for something (long-poll fetch, acks=all, a group join).",
            value=in_flight,
        )
        lag = HistogramMetricFamily(
            "pybroker_event_loop_lag_seconds",
            "How late the event loop runs a timer, sampled twice a second.",
        )
        lag.add_metric([], _buckets(r.loop_lag), r.loop_lag.sum)
        yield lag
        yield GaugeMetricFamily(
            "pybroker_event_loop_lag_last_seconds",
            "The latest event-loop lag sample.",
            value=r.loop_lag_last,
        )

    # -- per topic ----------------------------------------------------------------------------------
    def _topics(self) -> Iterator[Metric]:
        topics = self.view.topics()
        self.recorder.forget_topics_except({t.name for t in topics})
        families = {
            "bytes_in": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_bytesin", "Bytes appended by producers.", labels=["topic"]
            ),
            "messages_in": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_messagesin",
                "Records appended by producers.",
                labels=["topic"],
            ),
            "bytes_out": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_bytesout",
                "Record bytes sent to consumers.",
                labels=["topic"],
            ),
            "produce_requests": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_totalproducerequests",
                "Produce requests per topic (one per partition written).",
                labels=["topic"],
            ),
            "failed_produce_requests": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_failedproducerequests",
                "Produce requests per topic that failed.",
                labels=["topic"],
            ),
        }
        for name, st in sorted(self.recorder.topics.items()):
            for attr, family in families.items():
                family.add_metric([name], getattr(st, attr))
        yield from families.values()
        count = GaugeMetricFamily(
            "kafka_controller_kafkacontroller_globaltopiccount", "Topics in the cluster."
        )
        count.add_metric([], len(topics))
        yield count

    # -- per API ------------------------------------------------------------------------------------
    def _requests(self) -> Iterator[Metric]:
        total = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests handled, by API and version.",
            labels=["request", "version"],
        )
        latency = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltime_seconds",
            "Time from a request's dispatch until its response is ready, including any wait "
            "(long-poll fetch, acks=all), by API and version.",
            labels=["request", "version"],
        )
        for (api_key, version), h in sorted(self.recorder.requests.items()):
            labels = [_api_name(api_key), str(version)]
            total.add_metric(labels, h.count)
            latency.add_metric(labels, _buckets(h), h.sum)
        yield total
        yield latency

    # -- per partition ------------------------------------------------------------------------------
    def _partitions(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

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
        for p in parts:
            key = [p.topic, str(p.partition)]
            start.add_metric(key, p.log_start_offset)
            end.add_metric(key, p.log_end_offset)
            hw.add_metric(key, p.high_watermark)
            size.add_metric(key, p.size_bytes)
            segments.add_metric(key, p.segments)
            under.add_metric(key, 1 if p.under_replicated else 0)
            isr.add_metric(key, len(p.isr))
            replicas.add_metric(key, len(p.replicas))
        yield from (start, end, hw, size, segments, under, isr, replicas)
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount", "Partitions on this broker.", value=len(parts)
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount",
            "Partitions this broker leads.",
            value=sum(1 for p in parts if p.leader == node),
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led here whose ISR is smaller than their replica set.",
            value=sum(1 for p in parts if p.leader == node and p.under_replicated),
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a leader.",
            value=sum(1 for p in parts if p.offline),
        )
        yield GaugeMetricFamily(
            "kafka_controller_kafkacontroller_globalpartitioncount",
            "Partitions in the cluster.",
            value=len(parts),
        )

    # -- groups -------------------------------------------------------------------------------------
    def _groups(self) -> Iterator[Metric]:
        groups = self.view.groups()
        by_state = GaugeMetricFamily(
            "kafka_coordinator_group_groupmetadatamanager_numgroups",
            "Groups by state and type.",
            labels=["state", "type"],
        )
        for (state, kind), n in sorted(Counter((g.state, g.group_type) for g in groups).items()):
            by_state.add_metric([state, kind], n)
        yield by_state
        state = GaugeMetricFamily(
            "kafka_consumergroup_state",
            "1 for the group's current state (Empty, Stable, PreparingRebalance, ...).",
            labels=["consumergroup", "state", "type"],
        )
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of the group.", labels=["consumergroup"]
        )
        for g in groups:
            state.add_metric([g.group_id, g.state, g.group_type], 1)
            members.add_metric([g.group_id], len(g.members))
        yield state
        yield members
        labels = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "The group's committed offset.", labels=labels
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus the group's committed offset (what kafka-consumer-groups shows as LAG).",
            labels=labels,
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "The group's lag summed over a topic's partitions.",
            labels=["consumergroup", "topic"],
        )
        sums: Counter[tuple[str, str]] = Counter()
        for row in consumer_lag(self.view, [g.group_id for g in groups]):
            key = [row.group_id, row.topic, str(row.partition)]
            current.add_metric(key, row.committed_offset)
            lag.add_metric(key, row.lag)
            sums[(row.group_id, row.topic)] += row.lag
        for (group_id, topic), total in sorted(sums.items()):
            lag_sum.add_metric([group_id, topic], total)
        yield current
        yield lag
        yield lag_sum
