"""Kafka Streams (kafka-streams 4.3.1, unmodified): Kafka's word count (groupBy word -> count, so a
repartition topic and a compacted changelog) with exactly_once_v2 and with at_least_once, through a
kill -9 of its instance while it has uncommitted output.  The output, read with read_committed, must reach exactly the counts
computed here from the input.  With ``group.protocol=streams`` (KIP-1071: the broker assigns the tasks),
the word count runs through adding and removing a second instance."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from compat_tests.scenarios.test_streams_groups import describe, partitions_of, tasks
from compat_tests.streams.wordcount import (
    WordCountInstance,
    count_sequences,
    expected_counts,
    produce_lines,
    read_topic,
    run_word_count,
    sentences,
    wait_for_counts,
)

PARTITIONS = 2
LINES = sentences(300)


@pytest.mark.parametrize("guarantee", ["exactly_once_v2", "at_least_once"])
def test_word_count_through_an_instance_restart(bootstrap, admin, make_topic, tmp_path, guarantee) -> None:
    input_topic = make_topic("-in", partitions=PARTITIONS)
    output_topic = make_topic("-out", partitions=PARTITIONS)
    want = expected_counts(LINES)
    run = run_word_count(
        bootstrap,
        admin,
        tmp_path,
        guarantee=guarantee,
        input_topic=input_topic,
        output_topic=output_topic,
        partitions=PARTITIONS,
        lines=LINES,
    )
    # The kill must have hit the instance with uncommitted output (an open transaction under EOS).
    assert run.killed_in_flight
    seqs = run.sequences
    final = {word: seq[-1] for word, seq in seqs.items()}
    if guarantee == "exactly_once_v2":
        # Exactly once: every occurrence counted once, and (no record cache) each word's committed
        # output is its count going up by one per occurrence — never back, never a repeat, even
        # though the first instance died with a transaction open.
        assert final == want
        for word, seq in seqs.items():
            assert seq == list(range(1, want[word] + 1)), word
    else:
        # At least once: the killed instance's uncommitted input is processed again by the second,
        # on a store restored from a changelog that may already hold some of it, so a count can
        # overshoot and repeat, but never miss an occurrence.
        assert set(final) == set(want)
        short = {w: (final[w], n) for w, n in want.items() if final[w] < n}
        assert not short, f"counts below the input's (got, want): {short}"


# -- the streams rebalance protocol (KIP-1071) -------------------------------------------------------
STREAMS_PARTITIONS = 4
STREAMS_LINES = sentences(240)


def test_word_count_with_the_streams_protocol_through_adding_and_removing_an_instance(
    bootstrap: str, admin: Any, make_topic, tmp_path
) -> None:
    input_topic = make_topic("-in", partitions=STREAMS_PARTITIONS)
    output_topic = make_topic("-out", partitions=STREAMS_PARTITIONS)
    application_id = f"wc-streams-{uuid.uuid4().hex[:8]}"

    def instance(n: int) -> WordCountInstance:
        return WordCountInstance(
            bootstrap,
            application_id=application_id,
            input_topic=input_topic,
            output_topic=output_topic,
            state_dir=tmp_path / f"state-{n}",
            guarantee="exactly_once_v2",
            log_path=tmp_path / f"streams-{n}.log",
            group_protocol="streams",
        )

    thirds = [STREAMS_LINES[:80], STREAMS_LINES[80:160], STREAMS_LINES[160:]]
    produce_lines(bootstrap, input_topic, thirds[0])
    first = instance(1)
    second = None
    try:
        first.wait_running(90)
        wait_for_counts(bootstrap, output_topic, STREAMS_PARTITIONS, expected_counts(thirds[0]), 90)
        # A second instance joins: the tasks are split between the two.
        second = instance(2)
        second.wait_running(90)
        group = _wait_for_split(bootstrap, application_id)
        produce_lines(bootstrap, input_topic, thirds[1], first_index=80)
        wait_for_counts(bootstrap, output_topic, STREAMS_PARTITIONS, expected_counts(STREAMS_LINES[:160]), 90)
        # The first instance leaves: the second takes every task.
        assert first.stop() == 0, first.log_tail()
        _wait_for_single_owner(bootstrap, application_id, group)
        produce_lines(bootstrap, input_topic, thirds[2], first_index=160)
        wait_for_counts(bootstrap, output_topic, STREAMS_PARTITIONS, expected_counts(STREAMS_LINES), 90)
        assert second.stop() == 0, second.log_tail()
    except AssertionError as exc:
        tails = first.log_tail() + ("\n" + second.log_tail() if second is not None else "")
        raise AssertionError(f"{exc}\n{tails}") from None
    finally:
        first.kill()
        if second is not None:
            second.kill()
    seqs = count_sequences(read_topic(bootstrap, output_topic, STREAMS_PARTITIONS))
    want = expected_counts(STREAMS_LINES)
    # Exactly once through both rebalances: every word's counts go up by one per occurrence.
    assert {w: s[-1] for w, s in seqs.items()} == want
    for word, seq in seqs.items():
        assert seq == list(range(1, want[word] + 1)), word
    assert partitions_of(bootstrap, f"{application_id}-words-repartition") == STREAMS_PARTITIONS
    assert partitions_of(bootstrap, f"{application_id}-counts-changelog") == STREAMS_PARTITIONS


def _wait_for_split(bootstrap: str, group: str) -> dict[str, Any]:
    """Until the group is Stable with two members (two processes), each running some active tasks."""
    deadline = time.monotonic() + 90
    while True:
        described = describe(bootstrap, group)
        members = described["members"]
        if (
            described["group_state"] == "Stable"
            and len({m["process_id"] for m in members}) == 2
            and all(tasks(m["assignment"]["active_tasks"]) for m in members)
        ):
            every = [t for m in members for t in tasks(m["assignment"]["active_tasks"])]
            assert sorted(every) == sorted({(s, p) for s in ("0", "1") for p in range(STREAMS_PARTITIONS)})
            return described
        assert time.monotonic() < deadline, f"tasks not split over two instances: {described}"
        time.sleep(0.5)


def _wait_for_single_owner(bootstrap: str, group: str, before: dict[str, Any]) -> None:
    deadline = time.monotonic() + 90
    while True:
        described = describe(bootstrap, group)
        members = described["members"]
        if described["group_state"] == "Stable" and len({m["process_id"] for m in members}) == 1:
            every = sorted(t for m in members for t in tasks(m["assignment"]["active_tasks"]))
            if every == sorted({(s, p) for s in ("0", "1") for p in range(STREAMS_PARTITIONS)}):
                assert described["group_epoch"] > before["group_epoch"]
                return
        assert time.monotonic() < deadline, f"tasks not moved to the remaining instance: {described}"
        time.sleep(0.5)
