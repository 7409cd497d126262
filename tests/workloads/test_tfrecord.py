"""TFRecord framing and tf.train.Example parsing, against published check values and the protobuf
library."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from aihpc.base.errors import DataError
from aihpc.workloads.tfrecord import (
    crc32c,
    encode_example,
    masked_crc,
    parse_example,
    read_records,
    write_records,
)


def test_crc32c_check_value():
    # The CRC-32C check value of "123456789" (RFC 3720 appendix B.4; the CRC catalogue's
    # CRC-32/ISCSI).
    assert crc32c(b"123456789") == 0xE3069283
    # RFC 3720 B.4: 32 bytes of zeros -> 0x8A9136AA (sent as aa 36 91 8a), 32 of 0xff -> 0x62A8AB43.
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43


def test_masked_crc_is_tensorflows_rotation_plus_delta():
    crc = 0xE3069283
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    assert masked_crc(b"123456789") == (rotated + 0xA282EAD8) & 0xFFFFFFFF


def _example_class():
    """tf.train.Example built with the real protobuf library (a reference independent of our
    encoder)."""
    pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(name="example_test.proto", package="t", syntax="proto3")

    def message(name, fields, nested=()):
        m = f.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            field = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                field.type_name = type_name
        return m

    T, L = descriptor_pb2.FieldDescriptorProto, descriptor_pb2.FieldDescriptorProto
    message("BytesList", [("value", 1, T.TYPE_BYTES, L.LABEL_REPEATED, None)])
    message("FloatList", [("value", 1, T.TYPE_FLOAT, L.LABEL_REPEATED, None)])
    message("Int64List", [("value", 1, T.TYPE_INT64, L.LABEL_REPEATED, None)])
    feat = message(
        "Feature",
        [
            ("bytes_list", 1, T.TYPE_MESSAGE, L.LABEL_OPTIONAL, ".t.BytesList"),
            ("float_list", 2, T.TYPE_MESSAGE, L.LABEL_OPTIONAL, ".t.FloatList"),
            ("int64_list", 3, T.TYPE_MESSAGE, L.LABEL_OPTIONAL, ".t.Int64List"),
        ],
    )
    assert feat.name == "Feature"
    feats = f.message_type.add(name="Features")
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=T.TYPE_STRING, label=L.LABEL_OPTIONAL)
    entry.field.add(
        name="value", number=2, type=T.TYPE_MESSAGE, label=L.LABEL_OPTIONAL, type_name=".t.Feature"
    )
    entry.options.map_entry = True
    feats.field.add(
        name="feature",
        number=1,
        type=T.TYPE_MESSAGE,
        label=L.LABEL_REPEATED,
        type_name=".t.Features.FeatureEntry",
    )
    message("Example", [("features", 1, T.TYPE_MESSAGE, L.LABEL_OPTIONAL, ".t.Features")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Example"))


def test_parse_example_serialized_by_protobuf():
    Example = _example_class()
    voxels = np.arange(-5, 19, dtype="<i2").tobytes()
    ex = Example()
    ex.features.feature["x"].bytes_list.value.append(voxels)
    ex.features.feature["y"].float_list.value.extend([0.25, -0.5, 1.0, 0.125])
    ex.features.feature["n"].int64_list.value.extend([3, 300, -2])
    parsed = parse_example(ex.SerializeToString())
    assert parsed["x"] == [voxels]
    np.testing.assert_array_equal(parsed["y"], np.array([0.25, -0.5, 1.0, 0.125], dtype=np.float32))
    np.testing.assert_array_equal(parsed["n"], [3, 300, -2])


def test_encode_example_is_read_by_protobuf():
    Example = _example_class()
    data = encode_example({"x": b"\x01\x02\x03", "y": np.array([0.5, -1.5], dtype=np.float32)})
    ex = Example()
    ex.ParseFromString(data)
    assert list(ex.features.feature["x"].bytes_list.value) == [b"\x01\x02\x03"]
    assert list(ex.features.feature["y"].float_list.value) == [0.5, -1.5]


@pytest.mark.parametrize("compress", [False, True])
def test_records_round_trip(tmp_path: Path, compress: bool):
    path = tmp_path / "a.tfrecord"
    records = [b"", b"hello", bytes(range(256)) * 3]
    write_records(path, records, compress=compress)
    assert list(read_records(path)) == records
    if compress:
        assert path.read_bytes()[:2] == b"\x1f\x8b"
    else:  # the framing by hand: length, masked crc of the length, data, masked crc of the data
        raw = path.read_bytes()
        assert raw[:8] == struct.pack("<Q", 0) and raw[8:12] == struct.pack(
            "<I", masked_crc(raw[:8])
        )
        assert raw[12:16] == struct.pack("<I", masked_crc(b""))


def test_corrupt_records_are_one_line_errors(tmp_path: Path):
    path = tmp_path / "a.tfrecord"
    write_records(path, [b"payload"])
    raw = bytearray(path.read_bytes())
    raw[14] ^= 1  # flip a data bit
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="bad data checksum"):
        list(read_records(path))
    assert list(read_records(path, verify=False)) == [bytes(raw[12:19])]
    path.write_bytes(bytes(raw[:15]))
    with pytest.raises(DataError, match="ends inside a record"):
        list(read_records(path))
    path.write_bytes(b"not a tfrecord file at all")
    with pytest.raises(DataError, match="bad length checksum"):
        list(read_records(path))
    gz = tmp_path / "b.tfrecord"
    with gzip.open(gz, "wb") as f:
        f.write(b"\x05")
    with pytest.raises(DataError, match="ends inside a record header"):
        list(read_records(gz))
