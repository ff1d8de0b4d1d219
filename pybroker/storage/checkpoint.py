"""Kafka's text checkpoint files and partition.metadata, written atomically."""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

from pybroker.storage.errors import StorageError

CHECKPOINT_VERSION = 0


def read_if_exists(path: os.PathLike[str] | str) -> bytes | None:
    """The file's bytes, or None when it does not exist: one open instead of a stat and an open,
    which adds up when a broker opens ten thousand partitions at start-up."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_atomically(path: Path, data: bytes) -> None:
    """temp file, write, fsync, rename, fsync the directory."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_offset_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    data = read_if_exists(path)
    if data is None:
        return {}
    lines = data.decode().splitlines()
    try:
        if int(lines[0]) != CHECKPOINT_VERSION:
            raise StorageError(f"{path}: unsupported checkpoint version {lines[0]}")
        count = int(lines[1])
        offsets = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split()
            offsets[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError) as exc:
        raise StorageError(f"{path}: malformed checkpoint file: {exc}") from exc
    if len(offsets) != count:
        raise StorageError(f"{path}: expected {count} entries, found {len(offsets)}")
    return offsets


def encode_topic_id(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def decode_topic_id(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    write_atomically(
        directory / "partition.metadata", f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n".encode()
    )


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    path = directory / "partition.metadata"
    data = read_if_exists(path)
    if data is None:
        return None
    fields = dict(line.split(": ", 1) for line in data.decode().splitlines() if ": " in line)
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise StorageError(f"{path}: unsupported partition metadata")
    return decode_topic_id(fields["topic_id"].strip())
