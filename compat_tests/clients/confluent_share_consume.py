"""`share-consume` with confluent-kafka's ``ShareConsumer`` (librdkafka's KIP-932 share consumer).

The same command line and JSON-lines protocol as the Java ``share-consume`` command
(``compat_tests/java/.../ShareConsumeCommand.java``), so a scenario drives either client alike:
each delivered record is printed as ``{"event": "record", "partition", "offset", "key", "value",
"delivery_count"}``. ``--ack implicit`` (the default) lets the consumer accept a poll's records on
the next poll; ``--ack accept|release|reject`` acknowledges each record with that type and commits
after each poll (``share.acknowledgement.mode=explicit``); ``--ack control`` waits after each record
for a stdin line ``accept``, ``release`` or ``reject`` (acknowledged and committed at once, then
``{"event": "acked"}`` is printed), ``stop``, or ``close`` (which the Java command has not): close at
once, leaving that record and the rest of its poll unacknowledged. A line ``stop`` closes the consumer gracefully; end
of stdin exits at once, like a crashed application.

Run as ``python -m compat_tests.clients.confluent_share_consume --bootstrap B --topic T --group G
[--ack MODE] [--count N] [--deadline-ms MS]``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import queue
import sys
import threading
import time

from confluent_kafka import AcknowledgeType, KafkaException, Message, ShareConsumer

STOP = "stop"
CLOSE = "close"
EOF = "\0eof"
ACK_TYPES = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE, "reject": AcknowledgeType.REJECT}


def emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def record_json(message: Message) -> dict[str, object]:
    return {
        "event": "record",
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": message.offset(),
        "key": _b64(message.key()),  # type: ignore[arg-type]
        "value": _b64(message.value()),  # type: ignore[arg-type]
        "delivery_count": message.delivery_count(),
    }


def start_control_reader() -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            lines.put(line.strip())
        lines.put(EOF)

    threading.Thread(target=read, name="stdin-control", daemon=True).start()
    return lines


def take_control(control: queue.Queue[str], wait_s: float | None) -> str | None:
    """Next control line, or None when none arrives in time; end of stdin exits like a crash."""
    try:
        line = control.get(timeout=wait_s) if wait_s != 0 else control.get_nowait()
    except queue.Empty:
        return None
    if line == EOF:
        sys.stdout.flush()
        os._exit(3)  # no close(): the group and the broker see the member vanish
    return line


def run(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.deadline_ms / 1000
    control = start_control_reader()
    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "share.acknowledgement.mode": "implicit" if args.ack == "implicit" else "explicit",
    }
    consumer = ShareConsumer(config)
    consumer.subscribe([args.topic])
    emitted = 0
    stopping = False
    answer: str | None = None
    try:
        while not stopping and emitted < args.count and time.monotonic() < deadline:
            if take_control(control, 0) == STOP:
                break
            acknowledged = False
            for message in consumer.poll(0.2):
                if message.error() is not None:
                    emit({"error": str(message.error())})
                    continue
                if stopping:
                    # explicit mode: every record of the poll must be acknowledged before the next poll
                    if args.ack != "implicit":
                        consumer.acknowledge(message, AcknowledgeType.RELEASE)
                    continue
                emit(record_json(message))
                emitted += 1
                if args.ack == "control":
                    answer = take_control(control, None)
                    if answer == CLOSE:
                        break  # closed with this record and the rest of the poll unacknowledged
                    if answer not in ACK_TYPES:
                        stopping = True
                        consumer.acknowledge(message, AcknowledgeType.RELEASE)
                    else:
                        consumer.acknowledge(message, ACK_TYPES[answer])
                        failures = {tp: e for tp, e in consumer.commit_sync().items() if e is not None}
                        if failures:
                            emit({"error": f"commit_sync failed: {failures}"})
                        event = {"event": "acked", "offset": message.offset(), "partition": message.partition()}
                        emit({**event, "type": answer})
                elif args.ack != "implicit":
                    consumer.acknowledge(message, ACK_TYPES[args.ack])
                    acknowledged = True
                if emitted >= args.count:
                    stopping = True
            if answer == CLOSE:
                break
            if acknowledged:
                consumer.commit_sync()
        if args.ack == "implicit" and answer != CLOSE:
            consumer.commit_sync()  # the records of the last poll, accepted
    except KafkaException as exc:
        emit({"error": str(exc)})
        raise
    finally:
        consumer.close()
    emit({"event": "closed", "records": emitted})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="confluent_share_consume")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--ack", choices=["implicit", "accept", "release", "reject", "control"], default="implicit")
    parser.add_argument("--count", type=int, default=sys.maxsize)
    parser.add_argument("--deadline-ms", type=int, default=90_000)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
