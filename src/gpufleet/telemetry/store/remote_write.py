"""Prometheus remote-write 1.0 payloads: the WriteRequest protobuf, encoded by hand, then snappy-compressed.

message WriteRequest { repeated TimeSeries timeseries = 1; }
message TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
message Label        { string name = 1; string value = 2; }
message Sample       { double value = 1; int64 timestamp = 2; }   // timestamp in milliseconds
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpufleet.errors import DependencyMissingError

HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}


def varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 two's complement, as protobuf encodes negative varints
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return varint((number << 3) | 2) + varint(len(payload)) + payload


def encode_label(name: str, value: str) -> bytes:
    return _len_field(1, name.encode()) + _len_field(2, value.encode())


def encode_sample(value: float, timestamp_ms: int) -> bytes:
    return b"\x09" + struct.pack("<d", value) + b"\x10" + varint(timestamp_ms)


def encode_timeseries(labels: Mapping[str, str], samples: Sequence[tuple[float, int]]) -> bytes:
    """Labels are written sorted by name, as receivers require."""
    body = b"".join(_len_field(1, encode_label(k, labels[k])) for k in sorted(labels))
    body += b"".join(_len_field(2, encode_sample(v, t)) for v, t in samples)
    return body


def encode_write_request(series: Iterable[tuple[Mapping[str, str], Sequence[tuple[float, int]]]]) -> bytes:
    return b"".join(_len_field(1, encode_timeseries(labels, samples)) for labels, samples in series)


def snappy_compress(data: bytes) -> bytes:
    try:
        import cramjam
    except ImportError as exc:  # pragma: no cover - cramjam is a core dependency
        raise DependencyMissingError("remote write needs cramjam for snappy", fix="pip install cramjam") from exc
    return bytes(cramjam.snappy.compress_raw(data))


def snappy_decompress(data: bytes) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.decompress_raw(data))


# -- decoding (used by tests and by anyone who wants to inspect a payload) -----------------------------------
def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterable[tuple[int, int, bytes | int]]:
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _read_varint(buf, pos)
            yield number, wire, buf[pos : pos + length]
            pos += length
        elif wire == 1:
            yield number, wire, buf[pos : pos + 8]
            pos += 8
        elif wire == 0:
            value, pos = _read_varint(buf, pos)
            yield number, wire, value
        else:
            raise ValueError(f"unsupported wire type {wire}")


def decode_write_request(buf: bytes) -> list[tuple[dict[str, str], list[tuple[float, int]]]]:
    out = []
    for _n, _w, ts in _fields(buf):
        assert isinstance(ts, bytes)
        labels: dict[str, str] = {}
        samples: list[tuple[float, int]] = []
        for number, _wire, part in _fields(ts):
            assert isinstance(part, bytes)
            fields: dict[int, Any] = {n: v for n, _w2, v in _fields(part)}
            if number == 1:
                labels[bytes(fields[1]).decode()] = bytes(fields.get(2, b"")).decode()
            else:
                value = struct.unpack("<d", fields[1])[0]
                stamp = int(fields.get(2, 0))
                if stamp >= 1 << 63:
                    stamp -= 1 << 64
                samples.append((value, stamp))
        out.append((labels, samples))
    return out
