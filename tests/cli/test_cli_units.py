"""Pieces of the CLI that need no broker: Kafka's key partitioner, option parsing, argument errors."""

from __future__ import annotations

import pytest

from pybroker.__main__ import main
from pybroker.cli.client import CliError, parse_address
from pybroker.cli.group import _parse_datetime, _parse_duration
from pybroker.cli.produce import murmur2, partition_for_key


@pytest.mark.parametrize(
    "data,expected",
    # The vectors of Kafka's UtilsTest.testMurmur2.
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
    ],
)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_partition_for_key_is_positive_modulo() -> None:
    assert partition_for_key(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


def test_durations_and_datetimes() -> None:
    assert _parse_duration("PT1H30M") == 90 * 60 * 1000
    assert _parse_duration("P1DT2S") == (86400 + 2) * 1000
    assert _parse_datetime("1970-01-01T00:00:01Z") == 1000
    assert _parse_datetime("1970-01-01T00:00:01") == 1000  # no zone: UTC
    for bad in ("PT", "1h", ""):
        with pytest.raises(CliError):
            _parse_duration(bad)
    with pytest.raises(CliError):
        _parse_datetime("yesterday")


def test_parse_address() -> None:
    assert parse_address("localhost:9092") == ("localhost", 9092)
    with pytest.raises(CliError):
        parse_address("localhost")


def test_bad_brokers_setting_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topic", "list", "-X", "colour=blue"]) == 1
    err = capsys.readouterr().err
    assert err == "pybroker: error: -X colour: unknown setting (known: brokers)\n"
