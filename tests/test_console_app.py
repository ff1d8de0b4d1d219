"""The console's routes and the Prometheus collector over a fake ClusterView (no broker process):
read-only refusals, cross-site refusals, HTML escaping of everything a client controls, and the
collector's lag and partition families.  The real broker and browser are in tests/integration."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from pybroker.console.app import add_console_routes
from pybroker.metrics.collector import BrokerCollector
from pybroker.metrics.lag import LagHistory
from pybroker.metrics.recorder import BrokerMetrics
from pybroker.metrics.view import ConfigRow, Endpoint, GroupState, MemberState, PartitionState, TopicState
from pybroker.records.reader import Record

EVIL = '<img src=x onerror="alert(1)">'


class FakeView:
    cluster_id = "test-cluster"
    node_id = 1
    listener = "PLAINTEXT"

    def __init__(self) -> None:
        self.created: list[str] = []
        self.topic_list = [TopicState("orders", uuid.uuid4(), 2, False, {})]

    def brokers(self) -> list[Endpoint]:
        return [Endpoint(1, "localhost", 9092, "PLAINTEXT")]

    def controller_id(self) -> int:
        return 1

    def connection_counts(self) -> tuple[int, int, int]:
        return (3, 1, 2)

    def client_telemetry(self) -> tuple[int, list]:
        return 0, []

    def topics(self) -> list[TopicState]:
        return self.topic_list

    def topic(self, name: str) -> TopicState | None:
        return next((t for t in self.topic_list if t.name == name), None)

    def topic_configs(self, name: str) -> list[ConfigRow]:
        return [ConfigRow("cleanup.policy", "delete", "DEFAULT_CONFIG", False)]

    def partitions(self, topic: str | None = None) -> list[PartitionState]:
        parts = [
            PartitionState("orders", 0, 1, (1,), (1,), 0, 100, 100, 4096, 1),
            PartitionState("orders", 1, 1, (1, 2), (1,), 5, 50, 40, 2048, 2),
        ]
        return [p for p in parts if topic in (None, p.topic)]

    def high_watermark(self, topic: str, partition: int) -> int | None:
        return next((p.high_watermark for p in self.partitions(topic) if p.partition == partition), None)

    def groups(self) -> list[GroupState]:
        member = MemberState("m-1", EVIL, "/127.0.0.1", None, (("orders", 0),))
        return [GroupState(EVIL, "classic", "Stable", "consumer", "range", (member,))]

    def group(self, group_id: str) -> GroupState | None:
        return next((g for g in self.groups() if g.group_id == group_id), None)

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return {("orders", 0): 70, ("orders", 1): 40} if group_id == EVIL else {}

    def read_records(self, topic: str, partition: int, offset: int, limit: int) -> list[Record]:
        return [Record(offset, 1_700_000_000_000, b"k", b"</script>" + EVIL.encode(), (("h" + EVIL, b"v"),))]

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        return 0

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        self.created.append(name)

    def delete_topic(self, name: str) -> None:
        raise AssertionError("not reached in these tests")


def run_console(admin: bool, scenario) -> Any:
    async def main() -> Any:
        view = FakeView()
        app = web.Application()
        add_console_routes(app, view, BrokerMetrics(), LagHistory(view, 1.0), admin=admin)
        async with TestClient(TestServer(app)) as client:
            return await scenario(client, view)

    return asyncio.run(main())


def test_every_page_escapes_what_clients_control() -> None:
    async def scenario(client: TestClient, view: FakeView) -> dict[str, str]:
        pages = {}
        group_path = "/groups/" + EVIL.replace('"', "%22").replace(" ", "%20")
        for path in ("/", "/topics", "/topics/orders", "/topics/orders/messages", "/groups", group_path):
            resp = await client.get(path)
            assert resp.status == 200, path
            pages[path] = await resp.text()
        return pages

    pages = run_console(False, scenario)
    for path, text in pages.items():
        assert EVIL not in text, path
        # Only the console's own script ever closes a script element.
        assert text.count("</script>") == text.count("<script"), path
    assert "&lt;img src=x" in pages["/groups"]
    assert "&lt;/script&gt;" in pages["/topics/orders/messages"]


def test_read_only_console_refuses_changes() -> None:
    async def scenario(client: TestClient, view: FakeView) -> tuple[int, int, str, list[str]]:
        created = await client.post(
            "/topics", data={"name": "x"}, headers={"Origin": str(client.make_url(""))}
        )
        deleted = await client.post("/topics/orders/delete", headers={"Origin": str(client.make_url(""))})
        page = await (await client.get("/topics")).text()
        return created.status, deleted.status, page, view.created

    created, deleted, page, made = run_console(False, scenario)
    assert created == deleted == 403
    assert made == []
    assert "create-topic" not in page and "read-only" in page


def test_admin_console_refuses_cross_site_posts() -> None:
    async def scenario(client: TestClient, view: FakeView) -> tuple[int, int, int, list[str]]:
        own = str(client.make_url("")).rstrip("/")
        evil = await client.post("/topics", data={"name": "a"}, headers={"Origin": "http://evil.example"})
        bare = await client.post("/topics", data={"name": "b"}, skip_auto_headers=["Origin"])
        ok = await client.post("/topics", data={"name": "c"}, headers={"Origin": own}, allow_redirects=False)
        return evil.status, bare.status, ok.status, view.created

    evil, bare, ok, made = run_console(True, scenario)
    assert (evil, bare, ok) == (403, 403, 303)
    assert made == ["c"]


def test_collector_reports_lag_and_partition_gauges() -> None:
    view = FakeView()
    recorder = BrokerMetrics()
    recorder.produced("orders", 1000, 10)
    recorder.request_done(0, 9, 0.002)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(BrokerCollector(view, recorder, "test").render())
        for s in family.samples
    }

    def get(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert get("kafka_consumergroup_lag", consumergroup=EVIL, topic="orders", partition="0") == 30
    assert get("kafka_consumergroup_lag", consumergroup=EVIL, topic="orders", partition="1") == 0
    assert get("kafka_consumergroup_lag_sum", consumergroup=EVIL, topic="orders") == 30
    assert get("kafka_cluster_partition_underreplicated", topic="orders", partition="1") == 1
    assert get("kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert get("kafka_log_log_logstartoffset", topic="orders", partition="1") == 5
    assert get("kafka_server_brokertopicmetrics_messagesin_total", topic="orders") == 10
    assert get("kafka_network_requestmetrics_requests_total", request="Produce", version="9") == 1
    assert (
        get(
            "kafka_network_requestmetrics_totaltime_seconds_bucket",
            request="Produce",
            version="9",
            le="0.001",
        )
        == 0
    )
    assert (
        get(
            "kafka_network_requestmetrics_totaltime_seconds_bucket",
            request="Produce",
            version="9",
            le="0.0025",
        )
        == 1
    )
    assert get("kafka_network_requestchannel_requestqueuesize") == 1
    assert get("kafka_server_socketservermetrics_connection_count", listener="PLAINTEXT") == 3


def test_grafana_dashboard_uses_only_exported_metrics() -> None:
    """docs/grafana/pybroker.json is valid JSON and every series it queries is one the endpoint serves."""
    import json
    import re
    from pathlib import Path

    from pybroker.metrics.http import MetricsPage

    dashboard = json.loads(
        (Path(__file__).resolve().parent.parent / "docs/grafana/pybroker.json").read_text()
    )
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [
        v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)
    ]
    used = {m for e in exprs for m in re.findall(r"\b((?:kafka|pybroker|process)_[a-z0-9_]+)", e)}
    recorder = BrokerMetrics()
    recorder.request_done(0, 9, 0.001)
    recorder.produced("orders", 100, 1)
    recorder.fetched("orders", 100)
    text = MetricsPage(FakeView(), recorder).render().decode()
    served = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    assert len(used) > 15
    assert used <= served, sorted(used - served)
