"""TFRecord files of ``tf.train.Example`` records, read and written without TensorFlow.

CosmoFlow's reference data (mlcommons/hpc ``cosmoflow/prepare.py``) is one
``tf.train.Example`` per file with two features: ``x``, a bytes list holding
the raw int16 voxels, and ``y``, a float list of the 4 parameters; the files
may be GZIP-compressed.  This module reads and writes exactly that much of
the two formats.

TFRecord framing (TensorFlow ``core/lib/io/record_writer.cc``), per record::

    uint64 length (little endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8`` (mod 2**32) over the
CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of the bytes.

Protobuf wire format (protobuf.dev/programming-guides/encoding): a message is a
sequence of ``(field_number << 3 | wire_type)`` varint keys each followed by
its value; wire type 0 is a varint, 1 eight bytes, 2 a varint length and that
many bytes, 5 four bytes.  The messages involved (``tensorflow/core/example``)::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }   // map entry: key = 1, value = 2
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
                       Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed]; }  // unpacked (wire type 5) also accepted
    Int64List { repeated int64 value = 1 [packed]; }

The CRC-32C is computed in pure Python (a 256-entry table, one byte per
step: about 10 MB/s), so ``verify=False`` skips the data checksum of large
records; the length checksum is always checked.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from aihpc.base.errors import DataError

_POLY = 0x82F63B78  # CRC-32C, reflected
_MASK_DELTA = 0xA282EAD8


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``; crc32c(b"123456789") == 0xE3069283."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


# ------------------------------------------------------------------ framing
def _open(path: Path, mode: str) -> gzip.GzipFile | IO[Any]:
    raw = path.read_bytes()[:2] if mode == "rb" else b""
    if mode == "rb" and raw == b"\x1f\x8b":  # gzip magic: a GZIP-compressed TFRecord file
        return gzip.open(path, "rb")
    return open(path, mode)


def read_records(path: str | Path, *, verify: bool = True) -> Iterator[bytes]:
    """The records of TFRecord file ``path`` (plain or GZIP); DataError if it is corrupt."""
    path = Path(path)
    try:
        with _open(path, "rb") as f:
            while True:
                head = f.read(12)
                if not head:
                    return
                if len(head) < 12:
                    raise DataError(f"TFRecord file {path} ends inside a record header")
                (length,), (length_crc,) = (
                    struct.unpack("<Q", head[:8]),
                    struct.unpack("<I", head[8:]),
                )
                if masked_crc(head[:8]) != length_crc:
                    raise DataError(
                        f"TFRecord file {path}: bad length checksum (not a TFRecord file?)"
                    )
                data, tail = f.read(length), f.read(4)
                if len(data) < length or len(tail) < 4:
                    raise DataError(f"TFRecord file {path} ends inside a record of {length} bytes")
                if verify and masked_crc(data) != struct.unpack("<I", tail)[0]:
                    raise DataError(f"TFRecord file {path}: bad data checksum")
                yield data
    except OSError as exc:
        raise DataError(f"cannot read TFRecord file {path}: {exc}") from None


def write_records(path: str | Path, records: list[bytes], *, compress: bool = False) -> None:
    """Write ``records`` to TFRecord file ``path`` (GZIP-compressed if ``compress``)."""
    opener = gzip.open if compress else open
    with opener(Path(path), "wb") as f:
        for data in records:
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked_crc(length)))
            f.write(data + struct.pack("<I", masked_crc(data)))


# ----------------------------------------------------------------- protobuf
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise DataError("truncated protobuf varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise DataError("protobuf varint longer than 10 bytes")


def _fields(buf: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of each field of one message."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(buf):
                raise DataError("truncated protobuf fixed-size field")
            yield number, wire, buf[pos : pos + size]
            pos += size
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise DataError("truncated protobuf length-delimited field")
            yield number, wire, buf[pos : pos + size]
            pos += size
        else:
            raise DataError(f"unsupported protobuf wire type {wire}")


def _payload(value: bytes | int) -> bytes:
    """A length-delimited or fixed-size field's bytes; a varint there is a malformed message."""
    if isinstance(value, int):
        raise DataError("malformed protobuf: a varint where bytes were expected")
    return value


def _feature(buf: bytes) -> list[bytes] | np.ndarray:
    """One Feature: a list of bytes, a float32 array or an int64 array."""
    for number, wire, value in _fields(buf):
        if wire != 2:
            continue
        if number == 1:  # BytesList
            return [_payload(v) for n, w, v in _fields(_payload(value)) if n == 1 and w == 2]
        if number == 2:  # FloatList: packed (wire 2) or one float per field (wire 5)
            parts = [_payload(v) for n, _, v in _fields(_payload(value)) if n == 1]
            return np.frombuffer(b"".join(parts), dtype="<f4").copy()
        if number == 3:  # Int64List: packed varints, or one varint per field
            return np.array(_int64s(_payload(value)), dtype=np.uint64).astype(np.int64)
    return []


def _int64s(buf: bytes) -> list[int]:
    """An Int64List's values: packed varints (wire 2), or one varint per field (wire 0)."""
    values: list[int] = []
    for n, _, v in _fields(buf):
        if n != 1:
            continue
        if isinstance(v, int):
            values.append(v)
            continue
        pos = 0
        while pos < len(v):
            item, pos = _varint(v, pos)
            values.append(item)
    return values


def parse_example(record: bytes) -> dict[str, list[bytes] | np.ndarray]:
    """The features of one serialized ``tf.train.Example``: name -> bytes list or array."""
    out: dict[str, list[bytes] | np.ndarray] = {}
    for number, wire, features in _fields(record):
        if number != 1 or wire != 2:
            continue
        for n, w, entry in _fields(_payload(features)):
            if n != 1 or w != 2:
                continue
            key, value = "", b""
            for en, ew, ev in _fields(_payload(entry)):
                if en == 1 and ew == 2:
                    key = _payload(ev).decode("utf-8")
                elif en == 2 and ew == 2:
                    value = _payload(ev)
            out[key] = _feature(value)
    return out


def _key(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _encode_varint(len(payload)) + payload


def encode_example(features: dict[str, bytes | np.ndarray]) -> bytes:
    """Serialize a ``tf.train.Example``: ``bytes`` values as a BytesList of one item,
    float arrays as a packed FloatList."""
    entries = b""
    for name, value in features.items():
        if isinstance(value, bytes):
            feature = _len_field(1, _len_field(1, value))
        else:
            packed = np.asarray(value, dtype="<f4").tobytes()
            feature = _len_field(2, _len_field(1, packed))
        entry = _len_field(1, name.encode("utf-8")) + _len_field(2, feature)
        entries += _len_field(1, entry)
    return _len_field(1, entries)
