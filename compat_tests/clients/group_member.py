"""Drives a group-consume member process (the Java and Go compat clients) over its stdin/stdout.

The process prints one JSON event per line ("assigned"/"revoked"/"lost", "record", an error) and,
after each record, waits for our ``next`` or ``stop``; ``stop`` makes it leave the group
gracefully, and closing its stdin without ``stop`` makes it exit like a crashed application.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
from collections.abc import Callable
from typing import Any

# How long a member may take to leave its group and exit once told to stop.
PROCESS_SLACK_S = 30.0


def drive_group_member(
    process: subprocess.Popen[str],
    *,
    on_event: Callable[[dict[str, Any]], None],
    on_record: Callable[[int, int, bytes | None], bool],
    should_stop: Callable[[], bool],
    on_assign: Callable[[list[int]], None],
    on_error: Callable[[dict[str, Any]], None],
    decode_value: Callable[[str | None], bytes | None],
) -> None:
    """Relay the member's events until it exits; it is stopped (then killed) if still running.

    ``on_record`` returns True to stop after that record; ``on_error`` sees an error event and may
    raise to end the run. Every other event goes to ``on_event``, and ``on_assign`` hears each
    new whole assignment. The caller reads ``process.returncode`` afterwards."""
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.strip():
                events.put(json.loads(line))
        events.put(None)

    threading.Thread(target=pump, daemon=True).start()

    def send(line: str) -> None:
        # The member may exit between its last event and our answer (it was told to stop, or it
        # failed): its exit status says why, so a closed pipe here is not an error of its own.
        with contextlib.suppress(BrokenPipeError, ValueError):
            process.stdin.write(line + "\n")  # type: ignore[union-attr]
            process.stdin.flush()  # type: ignore[union-attr]

    assigned: list[int] | None = None
    stop_sent = False
    try:
        while True:
            if not stop_sent and should_stop():
                send("stop")
                stop_sent = True
            try:
                event = events.get(timeout=0.2)
            except queue.Empty:
                continue
            if event is None:
                break
            kind = event.get("event")
            if kind is None and "error" in event:
                on_error(event)
            elif kind == "record":
                done = on_record(event["partition"], event["offset"], decode_value(event["value"]))
                stop_sent = stop_sent or done
                send("stop" if done else "next")
            elif kind is not None:
                on_event(event)
                if kind in ("assigned", "revoked", "lost") and event["assignment"] != assigned:
                    assigned = event["assignment"]
                    on_assign(list(assigned))
        process.wait(PROCESS_SLACK_S)
    finally:
        if process.poll() is None:
            send("stop")
            try:
                process.wait(PROCESS_SLACK_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdin:
            # A line written into a pipe the member had already closed is still buffered: close()
            # flushes it again and would raise the BrokenPipeError that send() already set aside.
            with contextlib.suppress(BrokenPipeError):
                process.stdin.close()
