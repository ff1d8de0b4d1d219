"""Share groups (KIP-932) with confluent-kafka's ``ShareConsumer`` (librdkafka 2.16's share consumer).

The cases of ``test_share_groups`` (Kafka's Java ``KafkaShareConsumer``), run here with librdkafka's
share consumer: the ``share_client`` fixture is overridden, and each consumer is a
``compat_tests.clients.confluent_share_consume`` process speaking the Java ``share-consume``
command's protocol, so it can be SIGKILLed or SIGSTOPped like the JVM. Same broker settings
(3 s acquisition lock, delivery limit 3), on pybroker and on Apache Kafka 4.3.1 alike.

librdkafka 2.16 expresses every case: implicit acknowledgement
(``share.acknowledgement.mode=implicit``) and explicit ``acknowledge`` with ACCEPT, RELEASE and
REJECT, committed with ``commit_sync``; ``Message.delivery_count()`` gives the delivery count. (Its
Python API has no RENEW acknowledgement, KIP-1222, which no case here uses.)
"""

from __future__ import annotations

import base64
import time

import pytest

from compat_tests.scenarios import test_share_groups as java_cases
from compat_tests.scenarios.test_share_groups import EVENT_TIMEOUT_S, LOCK_S, ShareConsumer, produce

# The fixtures, and the cases collected here a second time (with this module's share_client).
share_bootstrap = java_cases.share_bootstrap
share_topic = java_cases.share_topic
consumers = java_cases.consumers
test_explicit_accept_reject_release = java_cases.test_explicit_accept_reject_release
test_delivery_limit_archives = java_cases.test_delivery_limit_archives
test_killed_consumer_records_redelivered = java_cases.test_killed_consumer_records_redelivered
test_hung_consumer_records_redelivered_after_lock = java_cases.test_hung_consumer_records_redelivered_after_lock
test_several_consumers_share_one_partition = java_cases.test_several_consumers_share_one_partition
test_implicit_acknowledgement = java_cases.test_implicit_acknowledgement
test_batches_larger_than_a_fetch_are_all_delivered = java_cases.test_batches_larger_than_a_fetch_are_all_delivered
test_share_state_survives_a_broker_restart = java_cases.test_share_state_survives_a_broker_restart


@pytest.fixture
def share_client() -> str:
    return "confluent"


def test_java_and_confluent_consumers_share_one_partition(
    share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer]
) -> None:
    """One Java and one librdkafka member of one share group, both accepting: every record goes to
    exactly one of them, once, on its first delivery."""
    topic, group = share_topic
    members = [ShareConsumer(share_bootstrap, topic, group, ack="accept", client=c) for c in ("java", "confluent")]
    consumers.extend(members)
    values = [f"x{i}" for i in range(60)]
    produce(share_bootstrap, topic, values)
    seen: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while len(seen) < len(values) and time.monotonic() < deadline:
        for m in members:
            event = m.next_event(0.05)
            if event is not None and event.get("event") == "record":
                seen.append((event["offset"], event["delivery_count"], base64.b64decode(event["value"]).decode()))
    assert sorted(seen) == [(i, 1, f"x{i}") for i in range(60)]
    assert all(m.no_record_for(LOCK_S + 2) for m in members)


def test_confluent_consumer_killed_java_consumer_gets_its_records(
    share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer]
) -> None:
    """A librdkafka member accepts r0, holds r1 and r2 and is SIGKILLed; a Java member of the same
    group gets r1 and r2 on their second delivery."""
    topic, group = share_topic
    produce(share_bootstrap, topic, ["r0", "r1", "r2"])
    first = ShareConsumer(share_bootstrap, topic, group, client="confluent")
    consumers.append(first)
    assert first.next_record() == (0, 1, "r0")
    first.acknowledge("accept")
    assert first.next_record() == (1, 1, "r1")
    second = ShareConsumer(share_bootstrap, topic, group, client="java")
    consumers.append(second)
    first.kill()
    got = []
    for _ in range(2):
        got.append(second.next_record())
        second.acknowledge("accept")
    assert got == [(1, 2, "r1"), (2, 2, "r2")]
    assert second.no_record_for(LOCK_S + 2)


def test_consumer_closed_without_acknowledging_hands_its_records_over(
    share_bootstrap: str, share_topic: tuple[str, str], consumers: list[ShareConsumer]
) -> None:
    """A librdkafka member in explicit mode accepts r0, then closes with r1 (and r2, acquired in the
    same fetch) unacknowledged: the close releases them at once (before their locks run out), and
    another member gets r1 and r2 on their second delivery."""
    topic, group = share_topic
    produce(share_bootstrap, topic, ["r0", "r1", "r2"])
    first = ShareConsumer(share_bootstrap, topic, group, client="confluent")
    consumers.append(first)
    assert first.next_record() == (0, 1, "r0")
    first.acknowledge("accept")
    assert first.next_record() == (1, 1, "r1")
    second = ShareConsumer(share_bootstrap, topic, group, client="confluent")
    consumers.append(second)
    first.send("close")
    assert first.process.wait(30) == 0, "".join(first.stderr)[-2000:]
    closed_at = time.monotonic()
    got = [second.next_record()]
    waited = time.monotonic() - closed_at
    second.acknowledge("accept")
    got.append(second.next_record())
    second.acknowledge("accept")
    assert got == [(1, 2, "r1"), (2, 2, "r2")]
    assert second.no_record_for(LOCK_S + 2)
    # released by the leave itself, not by their acquisition locks running out (3 s)
    assert waited < LOCK_S, waited
