"""One generic codec for every declared Kafka message and version.

Messages are plain dicts keyed by snake_case field names (see docs/ARCHITECTURE.md). For each
(struct, version) the declaration is compiled once into a reader and a writer written out as Python
source (``_StructSource``: runs of fixed-size fields merged into one precompiled ``struct.Struct``,
strings, records and arrays of structs inline, other fields through their closures) and cached; every
message, the hot Produce request and response included, goes through them.

Wire rules follow Apache Kafka's generated message classes (``generator/.../MessageDataGenerator.java``):
compact encodings and a tagged-field section in flexible versions, tagged fields written only when they
differ from their default, unknown tagged fields kept (under ``"_unknown_tags"``) and written back in tag
order, nullable structs prefixed by an int8 (-1 null / 1 present), or by an unsigned varint (0 / 1)
when tagged.
"""

from __future__ import annotations

import logging
import os
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from pybroker.protocol.api import REQUESTS, RESPONSES
from pybroker.protocol.schema import INHERIT, FieldSpec, MessageSpec, VersionRange, in_range

logger = logging.getLogger(__name__)

UNKNOWN_TAGS = "_unknown_tags"

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT16 = struct.Struct(">H")
_UINT32 = struct.Struct(">I")
_FLOAT64 = struct.Struct(">d")
_HEADER_PREFIX = struct.Struct(">hhi")

_FIXED_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
}

_NULL_INT16 = _INT16.pack(-1)
_NULL_INT32 = _INT32.pack(-1)
_ZERO_UUID = uuid.UUID(int=0)
_MAX_STRING_LENGTH = 0x7FFF
# The same topic ids arrive in every Produce and Fetch (v13+): one uuid.UUID per 16 bytes, made once
# (uuid.UUID(bytes=...) costs ~1.2 us, a look-up ~0.1; a UUID is immutable, so sharing it is safe).
# Bounded: emptied when full.
_UUIDS: dict[bytes, uuid.UUID] = {}
_UUID_CACHE_SIZE = 4096


class DecodeError(ValueError):
    """The bytes are not a valid encoding of the message at that version."""


class EncodeError(ValueError):
    """The message cannot be encoded at that version."""


class UnsupportedFieldError(EncodeError):
    """A non-default value was given for a field the version does not have (Kafka's
    UnsupportedVersionException), and the field is not ``ignorable``."""


class UnsupportedVersionError(ValueError):
    """The spec does not declare this version."""


# --------------------------------------------------------------------------------------------------
# Varints. Exported: the records layer may use them (or its own).


def encode_uvarint(value: int) -> bytes:
    if value < 0:
        raise EncodeError(f"unsigned varint cannot be negative: {value}")
    if value < 0x80:
        return bytes((value,))
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(buf: Any, pos: int, max_bytes: int = 5) -> tuple[int, int]:
    """Reads an unsigned varint of at most ``max_bytes`` bytes (5 for int32, 10 for int64)."""
    result = 0
    shift = 0
    for index in range(max_bytes):
        try:
            byte = buf[pos + index]
        except IndexError:
            raise DecodeError("truncated varint") from None
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos + index + 1
        shift += 7
    raise DecodeError("varint is too long")


def encode_varint(value: int) -> bytes:
    """Zigzag-encodes a signed 32-bit value."""
    return encode_uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def decode_varint(buf: Any, pos: int) -> tuple[int, int]:
    raw, pos = decode_uvarint(buf, pos, 5)
    return (raw >> 1) ^ -(raw & 1), pos


def encode_varlong(value: int) -> bytes:
    """Zigzag-encodes a signed 64-bit value."""
    return encode_uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def decode_varlong(buf: Any, pos: int) -> tuple[int, int]:
    raw, pos = decode_uvarint(buf, pos, 10)
    return (raw >> 1) ^ -(raw & 1), pos


_decode_uvarint = decode_uvarint
_UVARINT_SMALL = [bytes((value,)) for value in range(0x80)]


def _uvarint_bytes(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _UVARINT_SMALL[value]
    return encode_uvarint(value)


# --------------------------------------------------------------------------------------------------
# Defaults


def _is_nullable_anywhere(field: FieldSpec) -> bool:
    return not field.nullable_versions.is_empty


def _default_value(field: FieldSpec) -> Any:
    """The field's default as Kafka's generator defines it (immutable stand-ins for lists/structs)."""
    text = field.default
    kind = field.type
    if field.is_array:
        return None if text == "null" else ()
    if field.is_struct:
        return None if text == "null" else _EMPTY_STRUCT
    if kind in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(text, 0) if text not in (None, "") else 0
    if kind == "float64":
        return float(text) if text not in (None, "") else 0.0
    if kind == "bool":
        return text == "true"
    if kind == "string":
        if text == "null":
            return None
        return text if text is not None else ""
    if kind == "bytes":
        return None if text == "null" else b""
    if kind == "records":
        # Kafka's generator defaults records to null.
        return None if _is_nullable_anywhere(field) or text == "null" else b""
    if kind == "uuid":
        return uuid.UUID(text) if text not in (None, "") else _ZERO_UUID
    raise ValueError(f"unknown type {kind}")


class _EmptyStruct(dict):
    """Read-only stand-in for a struct whose every field has its default."""

    def __setitem__(self, key: Any, value: Any) -> None:  # pragma: no cover - defensive
        raise TypeError("the shared default struct is read-only")


_EMPTY_STRUCT: dict = _EmptyStruct()


def _is_default(field: FieldSpec, value: Any) -> bool:
    default = _default_value(field)
    if field.is_array:
        return (value is None and default is None) or (
            value is not None and default is not None and len(value) == 0
        )
    if field.is_struct:
        if value is None or default is None:
            return value is default
        return all(
            _is_default(child, value[child.name]) for child in field.fields if child.name in value
        ) and not value.get(UNKNOWN_TAGS)
    if field.type in ("bytes", "records") and value is not None and default is not None:
        return len(value) == 0
    return value == default


# --------------------------------------------------------------------------------------------------
# Compilation

Reader = Callable[[memoryview, int], tuple[Any, int]]
Writer = Callable[[list, Any], None]


class _StructCodec:
    """Compiled reader and writer of one struct (or the message body) at one version."""

    __slots__ = ("read", "write", "default_factory")

    def __init__(self, read: Reader, write: Writer, default_factory: Callable[[], dict]) -> None:
        self.read = read
        self.write = write
        self.default_factory = default_factory


def _field_is_flexible(field: FieldSpec, version: int, message_flexible: bool) -> bool:
    versions = field.flexible_versions
    if versions == INHERIT:
        return message_flexible
    assert not isinstance(versions, str), versions  # INHERIT is the only string a field takes
    return in_range(versions, version)


def _check_room(mv: memoryview, pos: int, length: int, what: str) -> int:
    end = pos + length
    if end > len(mv):
        raise DecodeError(f"{what}: length {length} runs past the end of the buffer")
    return end


def _primitive_reader(field: FieldSpec, kind: str, flexible: bool, nullable: bool) -> Reader:
    name = field.json_name
    if kind in _FIXED_FORMATS:
        unpack = struct.Struct(">" + _FIXED_FORMATS[kind]).unpack_from
        size = struct.calcsize(">" + _FIXED_FORMATS[kind])

        def read_fixed(mv: memoryview, pos: int) -> tuple[Any, int]:
            return unpack(mv, pos)[0], pos + size

        return read_fixed
    if kind == "uuid":

        def read_uuid(mv: memoryview, pos: int) -> tuple[Any, int]:
            end = _check_room(mv, pos, 16, name)
            raw = bytes(mv[pos:end])
            value = _UUIDS.get(raw)
            if value is None:
                if len(_UUIDS) >= _UUID_CACHE_SIZE:
                    _UUIDS.clear()
                value = _UUIDS[raw] = uuid.UUID(bytes=raw)
            return value, end

        return read_uuid
    if kind in ("string", "bytes", "records"):
        as_text = kind == "string"
        as_view = kind == "records"
        limit = _MAX_STRING_LENGTH if as_text else None
        if flexible:

            def read_length(mv: memoryview, pos: int) -> tuple[int, int]:
                raw = mv[pos]
                if raw < 0x80:
                    return raw - 1, pos + 1
                raw, pos = _decode_uvarint(mv, pos)
                return raw - 1, pos

        elif as_text:
            unpack16 = _INT16.unpack_from

            def read_length(mv: memoryview, pos: int) -> tuple[int, int]:
                return unpack16(mv, pos)[0], pos + 2

        else:
            unpack32 = _INT32.unpack_from

            def read_length(mv: memoryview, pos: int) -> tuple[int, int]:
                return unpack32(mv, pos)[0], pos + 4

        def read_sized(mv: memoryview, pos: int) -> tuple[Any, int]:
            length, pos = read_length(mv, pos)
            if length < 0:
                if length == -1 and nullable:
                    return None, pos
                raise DecodeError(
                    f"non-nullable field {name} was serialized as null or negative length {length}"
                )
            if limit is not None and length > limit:
                raise DecodeError(f"string field {name} had invalid length {length}")
            end = pos + length
            if end > len(mv):
                raise DecodeError(f"{name}: length {length} runs past the end of the buffer")
            if as_text:
                return str(mv[pos:end], "utf-8"), end
            if as_view:
                return mv[pos:end], end
            return bytes(mv[pos:end]), end

        return read_sized
    raise ValueError(f"unknown primitive type {kind}")


def _array_reader(field: FieldSpec, element_reader: Reader, flexible: bool, nullable: bool) -> Reader:
    name = field.json_name
    unpack32 = _INT32.unpack_from

    def read_array(mv: memoryview, pos: int) -> tuple[Any, int]:
        if flexible:
            count = mv[pos] - 1
            if count < 0x7F:
                pos += 1
            else:
                raw, pos = _decode_uvarint(mv, pos)
                count = raw - 1
        else:
            count = unpack32(mv, pos)[0]
            pos += 4
        if count < 0:
            if count == -1 and nullable:
                return None, pos
            raise DecodeError(f"non-nullable field {name} was serialized as null or negative length {count}")
        if count > len(mv) - pos:
            raise DecodeError(f"{name}: array of {count} elements but only {len(mv) - pos} bytes remain")
        items: list[Any] = []
        append = items.append
        for _ in range(count):
            item, pos = element_reader(mv, pos)
            append(item)
        return items, pos

    return read_array


def _fixed_array_reader(field: FieldSpec, code: str, flexible: bool, nullable: bool) -> Reader:
    """Arrays of a fixed-size primitive decode with a single unpack."""
    name = field.json_name
    item_size = struct.calcsize(">" + code)
    unpack32 = _INT32.unpack_from
    is_bool = code == "?"
    unpackers: dict[int, Callable] = {}

    def read_fixed_array(mv: memoryview, pos: int) -> tuple[Any, int]:
        if flexible:
            count = mv[pos] - 1
            if count < 0x7F:
                pos += 1
            else:
                raw, pos = _decode_uvarint(mv, pos)
                count = raw - 1
        else:
            count = unpack32(mv, pos)[0]
            pos += 4
        if count < 0:
            if count == -1 and nullable:
                return None, pos
            raise DecodeError(f"non-nullable field {name} was serialized as null or negative length {count}")
        end = pos + count * item_size
        if end > len(mv):
            raise DecodeError(f"{name}: array of {count} elements runs past the end of the buffer")
        unpacker = unpackers.get(count)
        if unpacker is None:
            unpacker = struct.Struct(f">{count}{code}").unpack_from
            if count <= 64:  # bounded, so hostile counts cannot grow the cache
                unpackers[count] = unpacker
        values = list(unpacker(mv, pos))
        if is_bool:
            values = [bool(v) for v in values]
        return values, end

    return read_fixed_array


def _nullable_struct_reader(inner: Reader, tagged: bool) -> Reader:
    unpack8 = _INT8.unpack_from

    if tagged:

        def read_tagged_nullable_struct(mv: memoryview, pos: int) -> tuple[Any, int]:
            marker, pos = _decode_uvarint(mv, pos)
            if marker <= 0:
                return None, pos
            return inner(mv, pos)

        return read_tagged_nullable_struct

    def read_nullable_struct(mv: memoryview, pos: int) -> tuple[Any, int]:
        marker = unpack8(mv, pos)[0]
        pos += 1
        if marker < 0:
            return None, pos
        return inner(mv, pos)

    return read_nullable_struct


def _field_reader(field: FieldSpec, version: int, message_flexible: bool, tagged: bool) -> Reader:
    flexible = _field_is_flexible(field, version, message_flexible)
    nullable = in_range(field.nullable_versions, version)
    if field.is_struct:
        inner = _compile_struct(field.fields, version, message_flexible).read
        if field.is_array:
            return _array_reader(field, inner, flexible, nullable)
        if nullable:
            return _nullable_struct_reader(inner, tagged)
        return inner
    if field.is_array:
        element = field.element_type
        if element in _FIXED_FORMATS:
            return _fixed_array_reader(field, _FIXED_FORMATS[element], flexible, nullable)
        element_reader = _primitive_reader(field, element, flexible, False)
        return _array_reader(field, element_reader, flexible, nullable)
    return _primitive_reader(field, field.type, flexible, nullable)


def _primitive_writer(field: FieldSpec, kind: str, flexible: bool, nullable: bool) -> Writer:
    name = field.json_name
    if kind in _FIXED_FORMATS:
        pack = struct.Struct(">" + _FIXED_FORMATS[kind]).pack

        def write_fixed(out: list, value: Any) -> None:
            out.append(pack(value))

        return write_fixed
    if kind == "uuid":

        def write_uuid(out: list, value: Any) -> None:
            if isinstance(value, uuid.UUID):
                out.append(value.bytes)
            elif isinstance(value, bytes | bytearray) and len(value) == 16:
                out.append(bytes(value))
            else:
                raise EncodeError(f"{name}: expected uuid.UUID, got {value!r}")

        return write_uuid
    if kind == "string":
        pack16 = _INT16.pack
        null_marker = b"\x00" if flexible else _NULL_INT16

        def write_string(out: list, value: Any) -> None:
            if value is None:
                if not nullable:
                    raise EncodeError(f"non-nullable field {name} cannot be null")
                out.append(null_marker)
                return
            data = value.encode("utf-8")
            length = len(data)
            if length > _MAX_STRING_LENGTH:
                raise EncodeError(f"{name}: string of {length} bytes is longer than {_MAX_STRING_LENGTH}")
            out.append((_uvarint_bytes(length + 1) if flexible else pack16(length)) + data)

        return write_string
    if kind in ("bytes", "records"):
        pack32 = _INT32.pack
        null_marker = b"\x00" if flexible else _NULL_INT32
        allow_slices = kind == "records"

        def write_bytes(out: list, value: Any) -> None:
            if value is None:
                if not nullable:
                    raise EncodeError(f"non-nullable field {name} cannot be null")
                out.append(null_marker)
                return
            if isinstance(value, bytes | bytearray):
                length = len(value)
            elif isinstance(value, memoryview):
                length = value.nbytes
            elif allow_slices and isinstance(getattr(value, "size", None), int):
                # A file range (storage FileSlice) travels as itself so the server can sendfile it.
                length = value.size
            else:
                raise EncodeError(f"{name}: expected bytes, got {type(value).__name__}")
            out.append(_uvarint_bytes(length + 1) if flexible else pack32(length))
            if length:
                out.append(value)

        return write_bytes
    raise ValueError(f"unknown primitive type {kind}")


def _array_writer(field: FieldSpec, element_writer: Writer, flexible: bool, nullable: bool) -> Writer:
    name = field.json_name
    pack32 = _INT32.pack
    null_marker = b"\x00" if flexible else _NULL_INT32

    def write_array(out: list, value: Any) -> None:
        if value is None:
            if not nullable:
                raise EncodeError(f"non-nullable field {name} cannot be null")
            out.append(null_marker)
            return
        count = len(value)
        out.append(_uvarint_bytes(count + 1) if flexible else pack32(count))
        for item in value:
            element_writer(out, item)

    return write_array


def _struct_array_writer(
    field: FieldSpec, element_writer: Writer, encoding_key: tuple, flexible: bool, nullable: bool
) -> Writer:
    """An array of structs whose elements may also be ``Encoded`` (see ``encode_element``): those are
    written as they are, provided they were encoded for this struct at an identical encoding."""
    name = field.json_name
    pack32 = _INT32.pack
    null_marker = b"\x00" if flexible else _NULL_INT32

    def write_struct_array(out: list, value: Any) -> None:
        if value is None:
            if not nullable:
                raise EncodeError(f"non-nullable field {name} cannot be null")
            out.append(null_marker)
            return
        count = len(value)
        out.append(_uvarint_bytes(count + 1) if flexible else pack32(count))
        for item in value:
            if item.__class__ is Encoded:
                if item.encoding_key is not encoding_key:
                    raise EncodeError(f"{name}: an element encoded for another version's layout")
                out.append(item)
            else:
                element_writer(out, item)

    return write_struct_array


def _fixed_array_writer(field: FieldSpec, code: str, flexible: bool, nullable: bool) -> Writer:
    name = field.json_name
    pack32 = _INT32.pack
    null_marker = b"\x00" if flexible else _NULL_INT32
    pack = struct.pack
    packers: dict[int, Callable] = {}

    def write_fixed_array(out: list, value: Any) -> None:
        if value is None:
            if not nullable:
                raise EncodeError(f"non-nullable field {name} cannot be null")
            out.append(null_marker)
            return
        count = len(value)
        packer = packers.get(count)
        if packer is not None:
            out.append(packer(count + 1 if flexible else count, *value))
            return
        if count <= 64:  # a bounded cache of the common small sizes, length prefix included
            packer = struct.Struct((">B" if flexible else ">i") + f"{count}{code}").pack
            packers[count] = packer
            out.append(packer(count + 1 if flexible else count, *value))
            return
        prefix = _uvarint_bytes(count + 1) if flexible else pack32(count)
        out.append(prefix + pack(f">{count}{code}", *value))

    return write_fixed_array


def _struct_value_writer(field: FieldSpec, inner: Writer, nullable: bool, tagged: bool) -> Writer:
    name = field.json_name
    present = b"\x01"
    null_marker = b"\x00" if tagged else b"\xff"

    def write_struct_value(out: list, value: Any) -> None:
        if value is None:
            if not nullable:
                raise EncodeError(f"non-nullable field {name} cannot be null")
            out.append(null_marker)
            return
        if nullable:
            out.append(present)
        inner(out, value)

    return write_struct_value


def _field_writer(field: FieldSpec, version: int, message_flexible: bool, tagged: bool) -> Writer:
    flexible = _field_is_flexible(field, version, message_flexible)
    nullable = in_range(field.nullable_versions, version)
    if field.is_struct:
        inner = _compile_struct(field.fields, version, message_flexible).write
        if field.is_array:
            key = _encoding_key(field.fields, version, message_flexible)
            return _struct_array_writer(field, inner, key, flexible, nullable)
        return _struct_value_writer(field, inner, nullable, tagged)
    if field.is_array:
        element = field.element_type
        if element in _FIXED_FORMATS:
            return _fixed_array_writer(field, _FIXED_FORMATS[element], flexible, nullable)
        element_writer = _primitive_writer(field, element, flexible, False)
        return _array_writer(field, element_writer, flexible, nullable)
    return _primitive_writer(field, field.type, flexible, nullable)


def _default_factory(field: FieldSpec, version: int, message_flexible: bool) -> Callable[[], Any]:
    """Fresh default values for decoded messages (callers may mutate them)."""
    default = _default_value(field)
    if field.is_array:
        return (lambda: None) if default is None else list
    if field.is_struct:
        if default is None:
            return lambda: None
        return _compile_struct(field.fields, version, message_flexible).default_factory
    return lambda: default


_STRUCT_CACHE: dict[tuple[int, int, bool], tuple[tuple[FieldSpec, ...], _StructCodec]] = {}
_KEY_CACHE: dict[tuple[int, int, bool], tuple[tuple[FieldSpec, ...], tuple]] = {}
_INTERNED_KEYS: dict[tuple, tuple] = {}


def _layout(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> tuple:
    """Everything the compiled writer of a struct at ``version`` depends on, and nothing else."""
    layout: list = [flexible]
    for field in fields:
        present = in_range(field.versions, version)
        entry: tuple = (field.name, field.type, field.default, field.ignorable, present)
        if present:
            entry += (
                in_range(field.nullable_versions, version),
                _field_is_flexible(field, version, flexible),
                flexible and in_range(field.tagged_versions, version),
                field.tag,
            )
            if field.is_struct:
                entry += (_layout(field.fields, version, flexible),)
        layout.append(entry)
    return tuple(layout)


def _encoding_key(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> tuple:
    """One shared object per distinct layout: versions with the same key encode a value of this
    struct byte for byte the same, so an encoding made at one serves them all (compared by identity)."""
    key = (id(fields), version, flexible)
    cached = _KEY_CACHE.get(key)
    if cached is not None:
        return cached[1]
    layout = _layout(fields, version, flexible)
    interned = _INTERNED_KEYS.setdefault(layout, layout)
    _KEY_CACHE[key] = (fields, interned)  # pins ``fields`` so its id is not reused
    return interned


def _compile_struct(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> _StructCodec:
    key = (id(fields), version, flexible)
    cached = _STRUCT_CACHE.get(key)
    if cached is not None:
        return cached[1]
    codec = _build_struct(fields, version, flexible)
    # Keeping ``fields`` in the value pins the object, so its id cannot be reused by another tuple.
    _STRUCT_CACHE[key] = (fields, codec)
    return codec


def _build_struct(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> _StructCodec:
    """The struct's reader and writer at ``version``: Python source written once from the declaration
    (``_StructSource``), so a message decodes and encodes in straight-line code."""
    read, write = _StructSource(version, flexible).compile(fields)
    factories_t = tuple(
        (f.name, _default_factory(f, version, flexible)) for f in fields if in_range(f.versions, version)
    )

    def default_factory() -> dict:
        return {name: factory() for name, factory in factories_t}

    return _StructCodec(read, write, default_factory)


class _Tags(NamedTuple):
    """A struct's tagged fields at one version, and the code for a tagged-field section that is not
    empty (the generated code handles the empty one, what nearly every message has, itself)."""

    fields: tuple[FieldSpec, ...]  # in tag order
    read: Callable[[memoryview, int, dict], int]
    write: Callable[[list, dict], None]


def _tags(fields: tuple[FieldSpec, ...], version: int, flexible: bool) -> _Tags:
    tagged = sorted(
        (
            f
            for f in fields
            if in_range(f.versions, version) and flexible and in_range(f.tagged_versions, version)
        ),
        key=lambda f: f.tag or 0,  # every tagged field has its tag (the schema's rule)
    )
    tagged_readers = {f.tag: (f.name, _field_reader(f, version, flexible, True)) for f in tagged}
    tagged_writers = tuple(
        (
            f.tag or 0,
            f.name,
            _field_writer(f, version, flexible, True),
            _encoded_default(f, version, flexible),
        )
        for f in tagged
    )
    tagged_factories = tuple((f.name, _default_factory(f, version, flexible)) for f in tagged)

    def read_tags(mv: memoryview, pos: int, out: dict) -> int:
        count, pos = _decode_uvarint(mv, pos)
        unknown = None
        for _ in range(count):
            tag, pos = _decode_uvarint(mv, pos)
            size, pos = _decode_uvarint(mv, pos)
            end = pos + size
            if end > len(mv):
                raise DecodeError(f"tagged field {tag}: size {size} runs past the end of the buffer")
            declared = tagged_readers.get(tag)
            if declared is None:
                if unknown is None:
                    unknown = {}
                unknown[tag] = bytes(mv[pos:end])
            else:
                # The reader sees only this field's bytes, so a lying size cannot make it overrun.
                out[declared[0]] = declared[1](mv[:end], pos)[0]
            pos = end
        for name, factory in tagged_factories:
            if name not in out:
                out[name] = factory()
        if unknown:
            out[UNKNOWN_TAGS] = unknown
        return pos

    def write_tags(out: list, value: dict) -> None:
        tags: list[tuple[int, bytes]] = []
        for tag, name, writer, default_bytes in tagged_writers:
            if name in value:
                parts: list = []
                writer(parts, value[name])
                data = b"".join(parts)
                if data != default_bytes:
                    tags.append((tag, data))
        unknown = value.get(UNKNOWN_TAGS)
        if unknown:
            tags.extend(unknown.items())
            tags.sort(key=lambda item: item[0])
        out.append(_uvarint_bytes(len(tags)))
        for tag, data in tags:
            out.append(_uvarint_bytes(tag) + _uvarint_bytes(len(data)))
            out.append(data)

    return _Tags(tuple(tagged), read_tags, write_tags)


def _indent(lines: list[str], depth: int = 1) -> list[str]:
    return ["    " * depth + line for line in lines]


class _StructSource:
    """Writes the source of a struct's ``read(mv, pos)`` and ``write(out, value)`` at one version.

    Runs of fixed-size fields are one ``struct.Struct``; strings, bytes and records, and arrays of
    structs (their elements' code written into the loop, however deep) are inline; any other field
    (nullable structs, arrays of primitives, uuids) calls its compiled closure (``_field_reader`` /
    ``_field_writer``), as does a tagged-field section that is not empty.  The error messages are the
    closures'.  What the code needs (Structs, closures, defaults) is bound as globals ``_g<n>``."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self.strict = strict_field_names()
        self.env: dict[str, Any] = {
            "_DecodeError": DecodeError,
            "_EncodeError": EncodeError,
            "_Encoded": Encoded,
            "_duv": _decode_uvarint,
            "_uvb": _uvarint_bytes,
            "_small": _UVARINT_SMALL,
            "_p16": _INT16.pack,
            "_p32": _INT32.pack,
            "_u16": _INT16.unpack_from,
            "_u32": _INT32.unpack_from,
            "_check_absent": _check_absent,
            "_refuse_unknown": _refuse_unknown,
        }
        self.variables = 0

    def bind(self, value: Any) -> str:
        name = f"_g{len(self.env)}"
        self.env[name] = value
        return name

    def variable(self) -> str:
        self.variables += 1
        return f"v{self.variables}"

    def compile(self, fields: tuple[FieldSpec, ...]) -> tuple[Reader, Writer]:
        read = ["def read(mv, pos):", *_indent(self.read_struct(fields, "res", 0)), "    return res, pos"]
        write = [
            "def write(out, value):",
            "    app = out.append",
            *_indent(self.write_struct(fields, "value", 0)),
        ]
        namespace: dict[str, Any] = {}
        source = "\n".join(read + write)
        exec(compile(source, f"<codec v{self.version}>", "exec"), self.env, namespace)  # noqa: S102
        return namespace["read"], namespace["write"]

    # -- reading -------------------------------------------------------------------------------------
    def read_struct(self, fields: tuple[FieldSpec, ...], target: str, depth: int) -> list[str]:
        """Lines that read the struct at ``pos`` into a new dict ``target``, ``pos`` then past it."""
        lines: list[str] = []
        pairs: list[str] = []
        tags = _tags(fields, self.version, self.flexible)
        run: list[FieldSpec] = []
        for field in fields:
            if not in_range(field.versions, self.version) or field in tags.fields:
                continue
            if not field.is_array and field.type in _FIXED_FORMATS:
                run.append(field)
                continue
            lines += self.read_run(run, pairs)
            run = []
            var = self.variable()
            pairs.append(f"{field.name!r}: {var}")
            lines += self.read_field(field, var, depth)
        lines += self.read_run(run, pairs)
        if not self.flexible:
            return [*lines, f"{target} = {{{', '.join(pairs)}}}"]
        defaults = []
        for field in tags.fields:
            factory = _default_factory(field, self.version, self.flexible)
            immutable = not field.is_array and not field.is_struct
            defaults.append(
                f"{field.name!r}: {self.bind(factory()) if immutable else self.bind(factory) + '()'}"
            )
        return [
            *lines,
            "if mv[pos] == 0:",  # no tagged fields: what nearly every struct has
            "    pos += 1",
            f"    {target} = {{{', '.join(pairs + defaults)}}}",
            "else:",
            f"    {target} = {{{', '.join(pairs)}}}",
            f"    pos = {self.bind(tags.read)}(mv, pos, {target})",
        ]

    def read_run(self, run: list[FieldSpec], pairs: list[str]) -> list[str]:
        if not run:
            return []
        packer = struct.Struct(">" + "".join(_FIXED_FORMATS[f.type] for f in run))
        names = []
        for field in run:
            names.append(self.variable())
            pairs.append(f"{field.name!r}: {names[-1]}")
        return [f"{', '.join(names)}, = {self.bind(packer.unpack_from)}(mv, pos)", f"pos += {packer.size}"]

    def read_field(self, field: FieldSpec, var: str, depth: int) -> list[str]:
        flexible = _field_is_flexible(field, self.version, self.flexible)
        nullable = in_range(field.nullable_versions, self.version)
        name = field.json_name
        if field.is_struct and field.is_array:
            item, append = f"item{depth}", f"append{depth}"
            return self.read_length(flexible, "_u32", 4) + self.null_or(
                name,
                nullable,
                var,
                [
                    "if n > len(mv) - pos:",
                    f"    raise _DecodeError(f'{name}: array of {{n}} elements but only {{len(mv) - pos}} bytes remain')",
                    f"{var} = []",
                    f"{append} = {var}.append",
                    "for _ in range(n):",
                    *_indent(self.read_struct(field.fields, item, depth + 1)),
                    f"    {append}({item})",
                ],
            )
        if not field.is_struct and not field.is_array and field.type in ("string", "bytes", "records"):
            text = field.type == "string"
            value = {
                "string": "str(mv[pos:end], 'utf-8')",
                "bytes": "bytes(mv[pos:end])",
                "records": "mv[pos:end]",
            }
            too_long = [
                f"if n > {_MAX_STRING_LENGTH}:",
                f"    raise _DecodeError(f'string field {name} had invalid length {{n}}')",
            ]
            length = self.read_length(flexible, "_u16", 2) if text else self.read_length(flexible, "_u32", 4)
            return length + self.null_or(
                name,
                nullable,
                var,
                [
                    *(too_long if text else []),
                    "end = pos + n",
                    "if end > len(mv):",
                    f"    raise _DecodeError(f'{name}: length {{n}} runs past the end of the buffer')",
                    f"{var} = {value[field.type]}",
                    "pos = end",
                ],
            )
        return [
            f"{var}, pos = {self.bind(_field_reader(field, self.version, self.flexible, False))}(mv, pos)"
        ]

    @staticmethod
    def read_length(flexible: bool, unpack: str, size: int) -> list[str]:
        """``n``: a length or count, -1 for null."""
        if flexible:
            return [
                "n = mv[pos]",
                "if n < 0x80:",
                "    pos += 1",
                "else:",
                "    n, pos = _duv(mv, pos)",
                "n -= 1",
            ]
        return [f"n = {unpack}(mv, pos)[0]", f"pos += {size}"]

    @staticmethod
    def null_or(name: str, nullable: bool, var: str, body: list[str]) -> list[str]:
        refuse = f"raise _DecodeError(f'non-nullable field {name} was serialized as null or negative length {{n}}')"
        return [
            "if n < 0:",
            *(
                ["    if n != -1:", f"        {refuse}", f"    {var} = None"]
                if nullable
                else [f"    {refuse}"]
            ),
            "else:",
            *_indent(body),
        ]

    # -- writing -------------------------------------------------------------------------------------
    def write_struct(self, fields: tuple[FieldSpec, ...], value: str, depth: int) -> list[str]:
        """Lines that write the struct dict ``value`` (with ``app``, ``out.append``)."""
        get = f"get{depth}"
        lines: list[str] = []
        if self.strict:  # strict_field_names: a misspelt key is an error, not a default
            known = frozenset(f.name for f in fields) | {UNKNOWN_TAGS}
            lines += [
                f"if not {self.bind(known.issuperset)}({value}):",
                f"    _refuse_unknown({self.bind(known)}, {value})",
            ]
        absent = tuple(f for f in fields if not in_range(f.versions, self.version) and not f.ignorable)
        if absent:  # fields this version lacks: only a default value may be given for them
            given = " or ".join(f"{f.name!r} in {value}" for f in absent)
            lines += [f"if {given}:", f"    _check_absent({self.bind(absent)}, {value}, {self.version})"]
        lines.append(f"{get} = {value}.get")
        tags = _tags(fields, self.version, self.flexible)
        run: list[FieldSpec] = []
        for field in fields:
            if not in_range(field.versions, self.version) or field in tags.fields:
                continue
            if not field.is_array and field.type in _FIXED_FORMATS:
                run.append(field)
                continue
            lines += self.write_run(run, get)
            run = []
            lines += self.write_field(field, get, depth)
        lines += self.write_run(run, get)
        if self.flexible:
            present = " or ".join(
                [f"{f.name!r} in {value}" for f in tags.fields] + [f"{get}({UNKNOWN_TAGS!r})"]
            )
            lines += [
                f"if {present}:",
                f"    {self.bind(tags.write)}(out, {value})",
                "else:",
                "    app(b'\\x00')",
            ]
        return lines

    def write_run(self, run: list[FieldSpec], get: str) -> list[str]:
        if not run:
            return []
        pack = self.bind(struct.Struct(">" + "".join(_FIXED_FORMATS[f.type] for f in run)).pack)
        args = ", ".join(f"{get}({f.name!r}, {self.bind(_default_value(f))})" for f in run)
        return [f"app({pack}({args}))"]

    def write_field(self, field: FieldSpec, get: str, depth: int) -> list[str]:
        flexible = _field_is_flexible(field, self.version, self.flexible)
        nullable = in_range(field.nullable_versions, self.version)
        name = field.json_name
        var = self.variable()
        value = f"{get}({field.name!r}, {self.bind(_default_value(field))})"
        if field.is_struct and field.is_array:
            item = f"item{depth}"
            key = self.bind(_encoding_key(field.fields, self.version, self.flexible))
            return self.write_null_or(
                name,
                nullable,
                var,
                value,
                "b'\\x00'" if flexible else "b'\\xff\\xff\\xff\\xff'",
                [
                    *(
                        [f"k = len({var}) + 1", "app(_small[k] if k < 0x80 else _uvb(k))"]
                        if flexible
                        else [f"app(_p32(len({var})))"]
                    ),
                    f"for {item} in {var}:",
                    f"    if {item}.__class__ is _Encoded:",
                    f"        if {item}.encoding_key is not {key}:",
                    f"            raise _EncodeError('{name}: an element encoded for another version\\'s layout')",
                    f"        app({item})",
                    "    else:",
                    *_indent(self.write_struct(field.fields, item, depth + 1), 2),
                ],
            )
        if field.type == "string":
            return self.write_null_or(
                name,
                nullable,
                var,
                value,
                "b'\\x00'" if flexible else "b'\\xff\\xff'",
                [
                    f"data = {var}.encode('utf-8')",
                    f"if len(data) > {_MAX_STRING_LENGTH}:",
                    f"    raise _EncodeError(f'{name}: string of {{len(data)}} bytes is longer than {_MAX_STRING_LENGTH}')",
                    *(
                        ["k = len(data) + 1", "app((_small[k] if k < 0x80 else _uvb(k)) + data)"]
                        if flexible
                        else ["app(_p16(len(data)) + data)"]
                    ),
                ],
            )
        # bytes and records (whose values may be memoryviews or file slices), and the rest
        return [f"{self.bind(_field_writer(field, self.version, self.flexible, False))}(out, {value})"]

    @staticmethod
    def write_null_or(
        name: str, nullable: bool, var: str, value: str, null: str, body: list[str]
    ) -> list[str]:
        on_null = (
            f"app({null})" if nullable else f"raise _EncodeError('non-nullable field {name} cannot be null')"
        )
        return [f"{var} = {value}", f"if {var} is None:", f"    {on_null}", "else:", *_indent(body)]


def strict_field_names() -> bool:
    """Whether encoding checks every key of a message dict against its struct's declared names
    (``PYBROKER_STRICT_CODEC=1``, set for the test suites and the brokers they start).  Off by
    default: the check costs ~0.25 us per struct, 14% of a Fetch response's encoding; tests are
    where a handler's misspelt name must fail.  Read when a (struct, version) is first compiled."""
    return os.environ.get("PYBROKER_STRICT_CODEC") == "1"


def _encoded_default(field: FieldSpec, version: int, flexible: bool) -> bytes:
    parts: list = []
    _field_writer(field, version, flexible, True)(parts, _default_value(field))
    return b"".join(parts)


class UnknownFieldError(EncodeError):
    """A message dict names a field its struct does not declare at any version (a misspelling)."""


def _refuse_unknown(known: frozenset, value: dict) -> None:
    names = sorted(str(k) for k in value if k not in known)
    raise UnknownFieldError(
        f"unknown field name(s) {', '.join(names)} (declared: {', '.join(sorted(known))})"
    )


def _check_absent(fields: tuple[FieldSpec, ...], value: dict, version: int) -> None:
    for field in fields:
        if field.name in value and not _is_default(field, value[field.name]):
            raise UnsupportedFieldError(
                f"attempted to write a non-default {field.json_name} at version {version}"
            )


# --------------------------------------------------------------------------------------------------
# Public API

_MESSAGE_CACHE: dict[tuple[int, int], tuple[MessageSpec, _StructCodec]] = {}


def _message_codec(spec: MessageSpec, version: int) -> _StructCodec:
    cached = _MESSAGE_CACHE.get((id(spec), version))
    if cached is not None:
        return cached[1]
    if not spec.supports(version):
        raise UnsupportedVersionError(f"{spec.name} has no version {version} (valid: {spec.valid_versions})")
    codec = _compile_struct(spec.fields, version, spec.is_flexible(version))
    _MESSAGE_CACHE[(id(spec), version)] = (spec, codec)
    return codec


def _as_byte_view(buf: Any) -> memoryview:
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def decode(spec: MessageSpec, version: int, buf: Any, offset: int = 0) -> tuple[dict, int]:
    """Decodes one message starting at ``offset``; returns it and the offset just past it."""
    cached = _MESSAGE_CACHE.get((id(spec), version))
    codec = cached[1] if cached is not None else _message_codec(spec, version)
    kind = type(buf)
    view = (
        memoryview(buf) if kind is bytearray or kind is bytes else _as_byte_view(buf)
    )  # the server's frames
    try:
        return codec.read(view, offset)
    except DecodeError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError) as exc:
        raise DecodeError(f"{spec.name} v{version}: {exc}") from exc


def _write_message(spec: MessageSpec, version: int, msg: Mapping[str, Any]) -> list:
    cached = _MESSAGE_CACHE.get((id(spec), version))
    codec = cached[1] if cached is not None else _message_codec(spec, version)
    out: list = []
    try:
        codec.write(out, msg)
    except EncodeError:
        raise
    except (struct.error, TypeError, AttributeError, OverflowError) as exc:
        raise EncodeError(f"{spec.name} v{version}: {exc}") from exc
    return out


def _joined_parts(out: list) -> list:
    """``out`` with its runs of bytes-like items joined, anything else (a file slice) kept apart."""
    try:
        return [b"".join(out)]  # every item bytes-like: nearly every message
    except TypeError:
        pass
    parts: list = []
    pending: list = []
    for item in out:
        if isinstance(item, bytes | bytearray | memoryview):
            pending.append(item)
        else:
            if pending:
                parts.append(b"".join(pending))
                pending = []
            parts.append(item)
    if pending:
        parts.append(b"".join(pending))
    return parts


def encode_parts(spec: MessageSpec, version: int, msg: Mapping[str, Any]) -> list:
    """Encodes ``msg``; non-bytes ``records`` values (objects with an int ``size``) stay separate
    elements right after their length prefix, everything else is joined into as few bytes as possible."""
    return _joined_parts(_write_message(spec, version, msg))


def _part_size(part: Any) -> int:
    return len(part) if isinstance(part, bytes | bytearray | memoryview) else part.size


_SIZE_AND_CORRELATION = struct.Struct(">ii")


def encode_response_frame(
    api_key: int, api_version: int, correlation_id: int, msg: Mapping[str, Any]
) -> list:
    """A whole response frame (int32 size, response header, body) as ``encode_parts`` gives it: one
    bytes, unless a records value is a file slice, which stays a part of its own."""
    flexible_header = _RESPONSE_HEADER_FLEXIBLE.get((api_key, api_version))
    if flexible_header is None:
        flexible_header = response_header_version(api_key, api_version) >= 1
        if len(_RESPONSE_HEADER_FLEXIBLE) < _HEADER_VERSIONS_MAX:
            _RESPONSE_HEADER_FLEXIBLE[(api_key, api_version)] = flexible_header
    out = _write_message(RESPONSES[api_key], api_version, msg)
    try:
        body = b"".join(out)  # every item bytes-like: nearly every response
    except TypeError:
        parts = _joined_parts(out)
    else:
        if flexible_header:
            return [_SIZE_AND_CORRELATION.pack(len(body) + 5, correlation_id) + _EMPTY_TAGS + body]
        return [_SIZE_AND_CORRELATION.pack(len(body) + 4, correlation_id) + body]
    size = (5 if flexible_header else 4) + sum(map(_part_size, parts))
    head = _SIZE_AND_CORRELATION.pack(size, correlation_id) + (_EMPTY_TAGS if flexible_header else b"")
    first = parts[0]
    if isinstance(first, bytes):
        parts[0] = head + first
        return parts
    return [head, *parts]


class Encoded(bytes):
    """One element of an array of structs, already encoded by ``encode_element``.  Placed in the
    array in place of its dict, it is written as it is; a handler caches these for large elements
    that rarely change (Metadata's topics with all their partitions)."""

    encoding_key: tuple


def _element_struct(spec: MessageSpec, path: tuple[str, ...]) -> FieldSpec:
    fields = spec.fields
    found: FieldSpec | None = None
    for name in path:
        found = next((f for f in fields if f.name == name), None)
        if found is None or not found.is_struct:
            raise ValueError(f"{spec.name} has no struct field {'.'.join(path)}")
        fields = found.fields
    if found is None or not found.is_array:
        raise ValueError(f"{spec.name}.{'.'.join(path)} is not an array of structs")
    return found


def element_encoding_key(spec: MessageSpec, version: int, path: tuple[str, ...]) -> tuple:
    """Equal (identical) for the versions of ``spec`` that encode an element of the array of structs
    at ``path`` (field names from the top, e.g. ``("topics",)``) the same way: a cache of
    ``encode_element`` results can be keyed by it and shared between those versions."""
    if not spec.supports(version):
        raise UnsupportedVersionError(f"{spec.name} has no version {version} (valid: {spec.valid_versions})")
    return _encoding_key(_element_struct(spec, path).fields, version, spec.is_flexible(version))


def encode_element(
    spec: MessageSpec, version: int, path: tuple[str, ...], value: Mapping[str, Any]
) -> Encoded:
    """``value`` encoded as one element of the array of structs at ``path``, ready to be placed in
    that array of a message of any version with the same ``element_encoding_key``."""
    fields = _element_struct(spec, path).fields
    flexible = spec.is_flexible(version)
    if not spec.supports(version):
        raise UnsupportedVersionError(f"{spec.name} has no version {version} (valid: {spec.valid_versions})")
    out: list = []
    try:
        _compile_struct(fields, version, flexible).write(out, value)
        encoded = Encoded(b"".join(out))
    except EncodeError:
        raise
    except (struct.error, TypeError, AttributeError, OverflowError) as exc:
        raise EncodeError(f"{spec.name} v{version} {'.'.join(path)}: {exc}") from exc
    encoded.encoding_key = _encoding_key(fields, version, flexible)
    return encoded


def encode(spec: MessageSpec, version: int, msg: Mapping[str, Any]) -> bytes:
    codec = _message_codec(spec, version)
    out: list = []
    try:
        codec.write(out, msg)
        return b"".join(out)
    except EncodeError:
        raise
    except TypeError as exc:
        if any(not isinstance(item, bytes | bytearray | memoryview) for item in out):
            raise EncodeError(
                f"{spec.name} v{version}: a records value is not bytes; use encode_parts"
            ) from exc
        raise EncodeError(f"{spec.name} v{version}: {exc}") from exc
    except (struct.error, AttributeError, OverflowError) as exc:
        raise EncodeError(f"{spec.name} v{version}: {exc}") from exc


# --------------------------------------------------------------------------------------------------
# Headers


class HeaderException(NamedTuple):
    kind: str  # "request" or "response"
    api_key: int
    versions: VersionRange
    header_version: int
    reason: str


# Every place where the header version does not follow "flexible body → flexible header".
HEADER_EXCEPTIONS: tuple[HeaderException, ...] = (
    HeaderException(
        "response",
        18,
        VersionRange(0, None),
        0,
        "ApiVersions responses always use header v0, even for flexible bodies (KIP-511): a client that "
        "sent a version the broker does not know must still be able to read the error response.",
    ),
    HeaderException(
        "request",
        7,
        VersionRange(0, 0),
        0,
        "ControlledShutdown v0 predates the client_id field, so its request header is v0.",
    ),
)
# A related irregularity lives in the RequestHeader spec itself: ClientId has flexibleVersions "none",
# so header v2 keeps the int16-length string (KIP-482: any broker must be able to read the header of an
# ApiVersions request newer than itself).

_REQUEST_HEADER_OVERRIDES = {
    (e.api_key, e.versions): e.header_version for e in HEADER_EXCEPTIONS if e.kind == "request"
}
_RESPONSE_HEADER_OVERRIDES = {
    (e.api_key, e.versions): e.header_version for e in HEADER_EXCEPTIONS if e.kind == "response"
}


def _override(table: dict, api_key: int, api_version: int) -> int | None:
    for (key, versions), header_version in table.items():
        if key == api_key and in_range(versions, api_version):
            return header_version
    return None


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int
    # False when only key, version and correlation id could be read (an unsupported api or version
    # whose header did not parse): enough to name the request in a log line, not to answer it.
    complete: bool = True


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible request versions, else 1 (0 where HEADER_EXCEPTIONS says so). Like Kafka, a version
    above the declared maximum counts as flexible when the flexible range is open-ended."""
    override = _override(_REQUEST_HEADER_OVERRIDES, api_key, api_version)
    if override is not None:
        return override
    spec = REQUESTS.get(api_key)
    if spec is not None and spec.is_flexible(api_version):
        return 2
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    override = _override(_RESPONSE_HEADER_OVERRIDES, api_key, api_version)
    if override is not None:
        return override
    spec = RESPONSES.get(api_key)
    if spec is not None and spec.is_flexible(api_version):
        return 1
    return 0


def _skip_tagged_fields(view: memoryview, pos: int) -> int:
    count, pos = _decode_uvarint(view, pos)
    for _ in range(count):
        _tag, pos = _decode_uvarint(view, pos)
        size, pos = _decode_uvarint(view, pos)
        pos = _check_room(view, pos, size, "request header tagged field")
    return pos


# (api_key, api_version) -> request header version: a request's header is read on every request,
# and working the version out walks the override table and the api's flexible range.  Bounded: a
# peer may send any pair.
_HEADER_VERSIONS: dict[tuple[int, int], int] = {}
_HEADER_VERSIONS_MAX = 4096
_new_tuple = tuple.__new__  # RequestHeader without NamedTuple's Python-level __new__


def decode_request_header(buf: Any) -> RequestHeader:
    """Parses the request header at the start of a frame (the bytes after the int32 size)."""
    view = memoryview(buf) if type(buf) is bytearray else _as_byte_view(buf)  # the server's frames: bytes
    if len(view) < _HEADER_PREFIX.size:
        raise DecodeError(f"request header needs {_HEADER_PREFIX.size} bytes, frame has {len(view)}")
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(view, 0)
    header_version = _HEADER_VERSIONS.get((api_key, api_version))
    if header_version is None:
        header_version = request_header_version(api_key, api_version)
        if len(_HEADER_VERSIONS) < _HEADER_VERSIONS_MAX:
            _HEADER_VERSIONS[(api_key, api_version)] = header_version
    pos = _HEADER_PREFIX.size
    if header_version == 0:
        return RequestHeader(api_key, api_version, correlation_id, None, pos)
    try:
        (length,) = _INT16.unpack_from(view, pos)
        pos += 2
        client_id = None
        if length >= 0:
            end = _check_room(view, pos, length, "client_id")
            client_id = str(view[pos:end], "utf-8")
            pos = end
        elif length != -1:
            raise DecodeError(f"client_id has invalid length {length}")
        if header_version >= 2:
            if pos < len(view) and view[pos] == 0:  # no tagged fields: what every client sends
                pos += 1
            else:
                pos = _skip_tagged_fields(view, pos)
    except (DecodeError, struct.error, UnicodeDecodeError) as exc:
        spec = REQUESTS.get(api_key)
        if spec is not None and spec.supports(api_version):
            raise DecodeError(f"malformed request header: {exc}") from exc
        # Key, version and correlation id are still worth having for the server's log line.
        logger.debug("unparseable header for unsupported api %s v%s: %s", api_key, api_version, exc)
        return RequestHeader(api_key, api_version, correlation_id, None, _HEADER_PREFIX.size, complete=False)
    return _new_tuple(RequestHeader, (api_key, api_version, correlation_id, client_id, pos, True))


_EMPTY_TAGS = b"\x00"
# (api_key, api_version) -> whether the response header is v1 (flexible): read on every response.
_RESPONSE_HEADER_FLEXIBLE: dict[tuple[int, int], bool] = {}


def encode_response_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    if response_header_version(api_key, api_version) >= 1:
        return _INT32.pack(correlation_id) + _EMPTY_TAGS
    return _INT32.pack(correlation_id)


# -- the client side (pybroker's CLI client, a follower's fetcher) ------------------------------------


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str, body: dict) -> bytes:
    """A whole request frame (int32 size, header, body) as a client sends it."""
    cid = client_id.encode()
    header = struct.pack(">hhih", api_key, api_version, correlation_id, len(cid)) + cid
    if request_header_version(api_key, api_version) >= 2:
        header += _EMPTY_TAGS
    payload = header + encode(REQUESTS[api_key], api_version, body)
    return _INT32.pack(len(payload)) + payload


def decode_response(api_key: int, api_version: int, frame: Any) -> tuple[int, dict]:
    """(correlation id, body) of a response frame (the bytes after its int32 size).  Raises
    DecodeError for a malformed one."""
    view = _as_byte_view(frame)
    if len(view) < 4:
        raise DecodeError(f"response frame of {len(view)} bytes has no correlation id")
    (correlation_id,) = _INT32.unpack_from(view, 0)
    pos = 4
    if response_header_version(api_key, api_version) >= 1:
        pos = _skip_tagged_fields(view, pos)
    message, _ = decode(RESPONSES[api_key], api_version, view, pos)
    return correlation_id, message
