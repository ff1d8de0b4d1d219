"""Types of the C record walk (records/_walk.c; setup.py builds it, optionally)."""

from collections.abc import Callable

from typing_extensions import Buffer

def walk_records(
    buf: Buffer, pos: int, end: int, index: int, count: int, base_timestamp: int, low: int, high: int, flags: int, /
) -> tuple[int, int, bool, list[tuple[int, bool, int]] | None]:
    """(next record index, its position, whether a record needs the Python walk, the records to check
    further: (index, has key, timestamp delta)) — see records/validator.py."""

def check_batch(
    buf: Buffer, crc32c: Callable[[Buffer], int], flags: int, low: int, high: int, /
) -> tuple[tuple[int, int, int, int, int, int, int, int, int, int, int, int, int, int], bool] | None:
    """(BatchHeader's fields, walked) of one sound produced batch, or None — see records/validator.py."""
