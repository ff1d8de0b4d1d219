"""A move between log dirs (AlterReplicaLogDirs) that a restart interrupts starts again and completes,
with every record kept: the future copy is dropped at start-up and made again from the current log."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from compat_tests.brokers import PyBroker
from compat_tests.scenarios.support import wait_for
from compat_tests.scenarios.test_log_dir_moves import ALTER_REPLICA_LOG_DIRS, NONE, consume_all, produce
from compat_tests.scenarios.test_newest_versions import call

THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"
KAFKA_STORAGE_ERROR = 56


def hosting(broker: PyBroker, topic: str) -> list[Path]:
    """The log dirs holding the partition's current directory."""
    return [d for d in broker.log_dirs if (d / f"{topic}-0").is_dir()]


def futures(broker: PyBroker, topic: str) -> list[Path]:
    return [p for d in broker.log_dirs for p in d.glob(f"{topic}-0.*-future")]


def test_a_move_interrupted_by_a_restart_completes_after_it(tmp_path: Path) -> None:
    broker = PyBroker(tmp_path, log_dirs=2, overrides={THROTTLE: "50000"})
    broker.start()
    try:
        topic = "moving"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        before = produce(broker.bootstrap, topic, "before", 1000)
        [source] = hosting(broker, topic)
        [destination] = [d for d in broker.log_dirs if d != source]
        answer = call(broker.bootstrap, ALTER_REPLICA_LOG_DIRS, 2,
                      {"dirs": [{"path": str(destination), "topics": [{"name": topic, "partitions": [0]}]}]})  # fmt: skip
        assert answer["results"][0]["partitions"][0]["error_code"] == NONE, answer
        wait_for(lambda: any((f / "00000000000000000000.log").stat().st_size > 0 for f in futures(broker, topic)),
                 what="the copy under way")  # fmt: skip
        during = produce(broker.bootstrap, topic, "during", 50)
        broker.stop()
        assert hosting(broker, topic) == [source] and len(futures(broker, topic)) == 1

        broker.overrides.pop(THROTTLE)
        broker.start()
        wait_for(lambda: hosting(broker, topic) == [destination] and not futures(broker, topic), 60,
                 "the move to complete after the restart")  # fmt: skip
        after = produce(broker.bootstrap, topic, "after", 50)
        expected = before + during + after
        assert consume_all(broker.bootstrap, topic, len(expected)) == expected
        assert "was interrupted; it starts again" in broker.log_path.read_text()
        broker.stop()
        broker.start()  # and the moved replica opens from its new dir
        deadline = time.monotonic() + 30
        while hosting(broker, topic) != [destination]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert consume_all(broker.bootstrap, topic, len(expected)) == expected
    finally:
        broker.stop()


def test_deleting_a_topic_during_a_move_deletes_its_future_copy(tmp_path: Path) -> None:
    broker = PyBroker(tmp_path, log_dirs=2, overrides={THROTTLE: "20000"})
    broker.start()
    try:
        topic = "deleted-while-moving"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        produce(broker.bootstrap, topic, "before", 300)
        [source] = hosting(broker, topic)
        [destination] = [d for d in broker.log_dirs if d != source]
        answer = call(broker.bootstrap, ALTER_REPLICA_LOG_DIRS, 2,
                      {"dirs": [{"path": str(destination), "topics": [{"name": topic, "partitions": [0]}]}]})  # fmt: skip
        assert answer["results"][0]["partitions"][0]["error_code"] == NONE, answer
        wait_for(lambda: futures(broker, topic), what="the future copy")
        admin.delete_topics([topic])[topic].result(30)
        wait_for(lambda: not futures(broker, topic) and not hosting(broker, topic), what="both copies gone")
        # The name is free again, in either dir, and the broker serves it.
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        again = wait_for(lambda: produce(broker.bootstrap, topic, "again", 10), what="the new topic writable")
        assert consume_all(broker.bootstrap, topic, len(again)) == again
        assert "moving the replica failed" not in broker.log_path.read_text()
    finally:
        broker.stop()


def test_a_destination_that_cannot_take_the_copy_answers_kafka_storage_error(tmp_path: Path) -> None:
    """The destination dir has gone (a file stands at its path): KAFKA_STORAGE_ERROR, the replica stays
    and serves where it was."""
    broker = PyBroker(tmp_path, log_dirs=2)
    broker.start()
    try:
        topic = "stays"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        before = produce(broker.bootstrap, topic, "before", 20)
        [source] = hosting(broker, topic)
        [destination] = [d for d in broker.log_dirs if d != source]
        destination.rename(destination.with_name("gone"))
        destination.write_text("not a directory")
        answer = call(broker.bootstrap, ALTER_REPLICA_LOG_DIRS, 2,
                      {"dirs": [{"path": str(destination), "topics": [{"name": topic, "partitions": [0]}]}]})  # fmt: skip
        assert answer["results"][0]["partitions"][0]["error_code"] == KAFKA_STORAGE_ERROR, answer
        after = produce(broker.bootstrap, topic, "after", 20)
        assert hosting(broker, topic) == [source]
        assert consume_all(broker.bootstrap, topic, 40) == before + after
    finally:
        broker.stop()
