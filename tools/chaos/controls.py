"""Negative controls: runs where Apache Kafka itself loses acknowledged writes, so a checker that
reports 0 lost in the real runs is known to be able to see loss.

- ``acks1``: acks=1 writers (no idempotence), SIGKILL of partition leaders until the checker finds
  acknowledged records missing (a leader acknowledges before its followers have the record; the new
  leader lacks it and the old one truncates when it returns), bounded by ``max_kills``/``max_s``.
  After each kill the records acknowledged in the ``WINDOW_S`` seconds before it are checked. Left to
  chance, the window is a replica fetch's round trip (milliseconds: pybroker's followers often have
  everything at the kill), so by default the followers are frozen for ``LAG_S`` just before it: the
  leader alone acknowledges what is written meanwhile, as acks=1 allows, and a follower that never
  saw it becomes leader. Kafka loses those writes the same way.
- ``unclean``: ``unclean.leader.election.enable=true`` on a topic with two replicas [A, B] on a 3-node
  cluster and min.insync.replicas=1: B is killed, writes are acknowledged by A alone, A is killed, B is
  restarted and made leader by an unclean election (ElectLeaders UNCLEAN), A returns and truncates.
  Two replicas, not three: in a 3-voter combined KRaft cluster, killing both up-to-date replicas of an
  RF 3 partition would also kill the controller quorum, and nothing could be elected at all; the third
  node keeps the quorum alive.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from tools.chaos.checker import check, read_partitions
from tools.chaos.harness import Cluster, Metadata, Options, restore, wait_healthy
from tools.chaos.replicas import wait_replicas_agree
from tools.chaos.workload import WRITERS, WriterLog, encode

logger = logging.getLogger(__name__)

WINDOW_S = 5.0  # acks=1 control: how far before a kill acknowledged records are checked
LAG_S = 1.0  # acks=1 control: how long the followers are frozen before the leader is killed


def acks1_control(
    cluster: Cluster, options: Options, max_kills: int = 8, max_s: float = 240, lagging_followers: bool = True
) -> dict[str, Any]:
    replication = len(cluster.node_ids())
    metadata = Metadata(cluster, options.topic + "-acks1")
    metadata.create_topic(options.partitions, replication, {"min.insync.replicas": "2"})
    wait_healthy(cluster, metadata, replication, 60)
    writers = [
        WRITERS[name](cluster.bootstrap, metadata.topic, options.partitions, "1", options.rate, i)
        for i, name in enumerate(options.writers)
    ]
    started = time.monotonic()
    for writer in writers:
        writer.start()
    kills: list[dict[str, Any]] = []
    result = None
    try:
        time.sleep(options.warmup_s)
        while len(kills) < max_kills and time.monotonic() - started < max_s:
            leaders = {p: n for p, n in metadata.leaders().items() if n >= 0}
            if not leaders:
                time.sleep(0.5)
                continue
            node = leaders[min(leaders)]
            followers = [n for n in cluster.node_ids() if n != node] if lagging_followers else []
            for follower in followers:
                cluster.freeze(follower)
            time.sleep(LAG_S if followers else 0.0)
            killed_at = time.monotonic()
            cluster.kill(node)
            for follower in followers:
                cluster.thaw(follower)
            time.sleep(options.down_s)
            cluster.restart(node)
            wait_healthy(cluster, metadata, replication, options.recover_timeout_s)
            # Only the last seconds before the kill can hold acknowledged records a follower lacked
            # (replication lags by milliseconds): read from their offsets on, not the whole log again.
            logs: list[WriterLog] = [log for writer in writers for log in writer.logs]
            window = killed_at - WINDOW_S
            start: dict[int, int] = {}
            for log in logs:
                with log.lock:
                    for (partition, _), (t_ack, offset) in log.acked.items():
                        if window <= t_ack < killed_at:
                            start[partition] = min(offset, start.get(partition, offset))
            records = read_partitions(cluster.bootstrap, metadata.topic, options.partitions, start=start)
            result = check(logs, records, acked_before=killed_at, acked_after=window)
            kills.append({"node": node, "at_s": round(killed_at - started, 1), "followers_frozen_s": LAG_S if followers
                          else 0, "lost_so_far": result.lost})
            logger.info("acks=1 control: kill %d of node %d, lost so far %d", len(kills), node, result.lost)
            if result.lost:
                break
            time.sleep(2)
    finally:
        for writer in writers:
            writer.stop()
        for writer in writers:
            writer.join(120)
        restore(cluster)
    wait_healthy(cluster, metadata, replication, options.recover_timeout_s)
    replicas = wait_replicas_agree(cluster, metadata.topic, options.partitions)
    return {
        "control": "acks1",
        "kills": kills,
        "elapsed_s": round(time.monotonic() - started, 1),
        "check": result.as_dict() if result else None,
        "replicas_agree_after": replicas["agree"],
        "loss_detected": bool(result and result.lost),
    }


def unclean_control(cluster: Cluster, options: Options, records: int = 200) -> dict[str, Any]:
    from confluent_kafka import ElectionType, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    nodes = cluster.node_ids()
    fresh, stale = nodes[0], nodes[1]
    topic = options.topic + "-unclean"
    metadata = Metadata(cluster, topic)
    new_topic = NewTopic(
        topic, num_partitions=1, replica_assignment=[[fresh, stale]],
        config={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
    )  # fmt: skip
    metadata.admin.create_topics([new_topic], operation_timeout=30)[topic].result(60)
    wait_healthy(cluster, metadata, 2, 60)
    steps: list[str] = []

    def partition() -> Any:
        return metadata.partitions().get(0)

    def wait_for(condition: Any, what: str, timeout_s: float = 90) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            meta = partition()
            if meta is not None and condition(meta):
                steps.append(f"{what}: leader {meta['leader']}, isr {meta['isr']}")
                return True
            time.sleep(0.5)  # poll interval
        steps.append(f"{what}: NOT within {timeout_s}s ({partition()})")
        return False

    if partition()["leader"] != fresh:  # make the replica that stays up the leader
        metadata.admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    wait_for(lambda m: m["leader"] == fresh, f"node {fresh} leads")
    cluster.kill(stale)
    wait_for(lambda m: stale not in m["isr"], f"node {stale} killed and out of the ISR")
    log = WriterLog("unclean0.0")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for seq in range(records):
        key = (0, seq)
        log.sent[key] = time.monotonic()

        def on_delivery(err: Any, msg: Any, key: tuple[int, int] = key) -> None:
            if err is None:
                log.acked[key] = (time.monotonic(), msg.offset())
            else:
                log.failed[key] = err.name()

        producer.produce(topic, encode(log.name, 0, seq), partition=0, on_delivery=on_delivery)
    producer.flush(60)
    steps.append(f"{len(log.acked)} records acknowledged by node {fresh} alone (acks=all, ISR of one)")
    cluster.kill(fresh)
    cluster.restart(stale)
    deadline = time.monotonic() + 60
    elected = unsupported = False
    while not elected and time.monotonic() < deadline:
        current = partition()
        if current is not None and current["leader"] == stale:
            # The controller elected it by itself once the fresh replica's session ended (the topic
            # allows unclean elections): ElectLeaders would only answer ELECTION_NOT_NEEDED.
            steps.append(f"node {stale} elected without ElectLeaders (the topic's unclean.leader.election.enable)")
            break
        if not unsupported:
            try:
                results = metadata.admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(topic, 0)]).result(10)
                elected = all(error is None for error in results.values())
            except Exception as error:  # noqa: BLE001 - whatever ElectLeaders says, the partition state decides
                steps.append(f"ElectLeaders UNCLEAN: {error!r}")
                unsupported = "UNSUPPORTED_FEATURE" in str(error)  # the broker has no ElectLeaders
        if not elected:
            time.sleep(1)
    stale_elected = wait_for(lambda m: m["leader"] == stale, f"node {stale} (stale) elected uncleanly")
    cluster.restart(fresh)
    wait_for(lambda m: len(m["isr"]) == 2, f"node {fresh} back, truncated and in the ISR")
    found = read_partitions(cluster.bootstrap, topic, 1)
    result = check([log], found)
    # The returning replica must have truncated what the stale leader never had: both logs the same.
    replicas = wait_replicas_agree(cluster, topic, 1, replicas={0: [fresh, stale]})
    return {
        "control": "unclean",
        "steps": steps,
        "stale_replica_elected": stale_elected,
        "check": result.as_dict(),
        "replicas_agree_after": replicas["agree"],
        "loss_detected": result.lost > 0,
    }
