import struct

import pytest

from pybroker.protocol.framing import FrameReader, FrameTooLarge, InvalidFrame


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_frames_cut_from_one_chunk_and_across_chunks():
    r = FrameReader(1024)
    data = frame(b"a" * 10) + frame(b"bb") + frame(b"c" * 100)
    assert [bytes(f) for f in r.feed(data[:13])] == []
    out = r.feed(data[13:18])
    assert [bytes(f) for f in out] == [b"a" * 10]
    out = r.feed(data[18:])
    assert [bytes(f) for f in out] == [b"bb", b"c" * 100]
    assert not r.has_partial_frame


def test_byte_by_byte():
    r = FrameReader(1024)
    data = frame(b"hello") + frame(b"") + frame(b"world!")
    got = []
    for i in range(len(data)):
        got += [bytes(f) for f in r.feed(data[i : i + 1])]
    assert got == [b"hello", b"", b"world!"]


def test_oversized_frame_rejected_before_payload_arrives():
    r = FrameReader(100)
    with pytest.raises(FrameTooLarge):
        r.feed(struct.pack(">i", 101))


def test_oversized_prefix_split_across_chunks():
    r = FrameReader(100)
    assert r.feed(b"\x00\x00") == []
    with pytest.raises(FrameTooLarge):
        r.feed(b"\x7f\xff")


def test_negative_length_rejected():
    r = FrameReader(100)
    with pytest.raises(InvalidFrame):
        r.feed(struct.pack(">i", -5) + b"xxxx")


# -- with a memory pool (queued.max.request.bytes) ------------------------------------------------

from pybroker.protocol.memory_pool import MemoryPool  # noqa: E402


def test_whole_frames_are_charged_and_never_refused():
    pool = MemoryPool(10)
    r = FrameReader(1024, pool)
    out = r.feed(frame(b"a" * 8) + frame(b"b" * 8))
    assert [bytes(f) for f in out] == [b"a" * 8, b"b" * 8]
    assert pool.available == 10 - 16 and not r.blocked
    for f in out:
        pool.release(len(f))
    assert pool.available == 10


def test_partial_frame_allocated_when_its_size_is_read_and_blocked_when_the_pool_is_empty():
    woken = []
    pool = MemoryPool(100, on_available=lambda: woken.append(True))
    first, second = FrameReader(1024, pool), FrameReader(1024, pool)
    # Non-strict, as Kafka's pool: a frame larger than what is left (or than the pool) still gets it.
    assert first.feed(frame(b"x" * 500)[:50]) == []
    assert pool.available == 100 - 500 and first.allocated_partial_bytes == 500
    assert second.feed(frame(b"y" * 20)[:10]) == [] and second.blocked
    assert second.allocated_partial_bytes == 0
    # Still nothing: feeding more data or nothing keeps it blocked without charging anything.
    assert second.feed(b"") == [] and second.blocked and pool.available == -400
    [done] = first.feed(frame(b"x" * 500)[50:])
    assert bytes(done) == b"x" * 500
    pool.release(len(done))
    assert woken == [True] and pool.available == 100
    assert second.feed(b"") == [] and not second.blocked and pool.available == 80
    [late] = second.feed(frame(b"y" * 20)[10:])
    assert bytes(late) == b"y" * 20


def test_frames_after_an_assembled_frame_in_the_same_chunk():
    pool = MemoryPool(1000)
    r = FrameReader(1024, pool)
    data = frame(b"a" * 300) + frame(b"b") + frame(b"c" * 5)
    assert r.feed(data[:100]) == []
    out = r.feed(data[100:])
    assert [bytes(f) for f in out] == [b"a" * 300, b"b", b"c" * 5]
    assert pool.available == 1000 - 306 and not r.has_partial_frame
