"""Append N MiB of 16 KiB batches (1 KiB records) to a fresh Log, then read it all back via FileSlices.

Usage: python bench/storage_append.py [--mib 1024] [--dir /tmp/somewhere]
Prints MB/s (10^6 bytes/s) for append and read; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from pybroker.records import SimpleRecord, build_batch, validate_produce_batches
from pybroker.storage import Log, LogConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir=args.dir))
    try:
        records = [SimpleRecord(None, os.urandom(1000), timestamp_ms=1_700_000_000_000) for _ in range(16)]
        template = build_batch(records, producer_id=-1)
        batch_count = args.mib * 1024 * 1024 // len(template)
        log = Log.create(root / "bench-0", "bench", 0, LogConfig(), 0)
        started = time.perf_counter()
        for _ in range(batch_count):
            buf = bytearray(template)  # the server hands over a fresh request buffer each time
            log.append(buf, validate_produce_batches(buf), leader_epoch=0, now_ms=1_700_000_000_000)
        append_seconds = time.perf_counter() - started
        total = batch_count * len(template)
        started = time.perf_counter()
        offset, read_bytes = 0, 0
        end = log.log_end_offset
        while offset < end:
            file_slice = log.read(offset, 1024 * 1024)
            data = file_slice.read()
            read_bytes += len(data)
            # next offset from the last whole batch in the slice, as a consumer would
            position, last_next = 0, offset
            while position + 61 <= len(data):
                length = int.from_bytes(data[position + 8 : position + 12], "big")
                if position + 12 + length > len(data):
                    break
                base = int.from_bytes(data[position : position + 8], "big")
                last_next = base + int.from_bytes(data[position + 23 : position + 27], "big") + 1
                position += 12 + length
            offset = last_next
        read_seconds = time.perf_counter() - started
        print(f"batch size {len(template)} bytes, {batch_count} batches, {total / 1e6:.0f} MB")
        print(
            f"append: {total / append_seconds / 1e6:8.1f} MB/s ({batch_count / append_seconds:,.0f} batches/s)"
        )
        print(f"read:   {read_bytes / read_seconds / 1e6:8.1f} MB/s (pread through FileSlice, 1 MiB fetches)")
        log.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
