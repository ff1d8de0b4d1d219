import mmap
import struct

import pytest

from pybroker.protocol.framing import LAZY_FRAME_SIZE, FrameReader, FrameTooLarge, InvalidFrame


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


# -- the buffered-protocol side: reads go where the reader says ----------------------------------


def _read(r: FrameReader, data: bytes) -> list[bytearray]:
    """What a transport does: read into the offered buffer (at most its length), report the count."""
    buf = r.get_buffer()
    n = min(len(buf), len(data))
    buf[:n] = data[:n]
    return r.buffer_updated(n)


def test_rest_of_a_large_frame_is_read_straight_into_its_own_buffer():
    payload = bytes(range(256)) * 1000
    data = frame(payload)
    r = FrameReader(1 << 20)
    assert _read(r, data[:1000]) == []
    offered = r.get_buffer()
    assert len(offered) == len(payload) - 996  # exactly the rest of this frame, nothing beyond it
    [done] = _read(r, data[1000:])
    assert offered.obj is done  # the kernel's read landed in the frame itself: no copy
    assert isinstance(done, bytearray) and done == payload


def test_a_frame_above_the_lazy_size_is_resident_only_as_it_arrives():
    """A peer announcing a large request and sending little costs pool budget, not resident memory
    (a bytearray would be zero-filled at once): the frame is anonymous memory, filled in place."""
    size = LAZY_FRAME_SIZE * 3
    payload = bytes(range(256)) * (size // 256)
    data = frame(payload)
    r = FrameReader(size * 2)
    assert _read(r, data[:1000]) == []
    offered = r.get_buffer()
    assert isinstance(offered.obj, mmap.mmap) and len(offered) == size - 996
    done: list = []
    rest = memoryview(data)[1000:]
    while rest:
        n = min(len(rest), 65536)
        done += _read(r, bytes(rest[:n]))
        rest = rest[n:]
    [whole] = done
    assert whole is offered.obj and bytes(whole) == payload
    whole[0:1] = b"X"  # writable, as the produce path needs
    assert whole[0:1] == b"X"


def test_frames_are_writable_buffers_of_their_own():
    r = FrameReader(1024)
    a, b = r.feed(frame(b"first") + frame(b"second"))
    a[0:1] = b"F"  # the produce path stamps offsets into the request's own bytes
    assert (bytes(a), bytes(b)) == (b"First", b"second")
    # the scratch buffer is reused by the next read; the frames handed out keep their bytes
    assert [bytes(f) for f in r.feed(frame(b"zzzzzzzzzzzz"))] == [b"zzzzzzzzzzzz"]
    assert bytes(b) == b"second"


def test_readers_sharing_a_scratch_buffer_keep_their_partial_prefixes():
    from pybroker.protocol.framing import ScratchBuffer

    shared = ScratchBuffer(64)
    one, two = FrameReader(1024, scratch=shared), FrameReader(1024, scratch=shared)
    assert _read(one, frame(b"abc")[:2]) == []
    assert _read(two, frame(b"xyz")[:3]) == []
    assert [bytes(f) for f in _read(one, frame(b"abc")[2:])] == [b"abc"]
    assert [bytes(f) for f in _read(two, frame(b"xyz")[3:])] == [b"xyz"]


def test_unread_head_names_what_stood_where_a_size_should():
    r = FrameReader(1024)
    with pytest.raises(FrameTooLarge):
        r.feed(b"\x16\x03\x01\x02\x00rest of a TLS client hello")
    assert r.unread_head(2) == b"\x16\x03"
