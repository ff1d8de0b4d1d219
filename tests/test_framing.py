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
