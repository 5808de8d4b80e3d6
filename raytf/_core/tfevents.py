"""The scalars a program writes with `tf.summary` (TensorBoard's event files), read without TensorFlow: the
records of an event file, the scalars of one record, and the rows they make (one per step). Pure but for the
protobuf decoding (the `Event` message as tensorboardX ships it: the driver writes its own event files with it).

A program that trains without Keras `fit` or `raytf.report` (orbit, the Model Garden, a custom loop) reports to
raytf this way without a line changed (raytf issue 55): script mode's host reads its event files
(raytf/_task/script/summaries.py) into metrics rows."""

from __future__ import annotations

import struct
from collections.abc import Iterable

# An event file's record (TensorFlow's record_writer.cc): the data's length (uint64, little-endian), that length's
# masked CRC-32C (uint32), the data (a serialized Event), the data's masked CRC-32C (uint32).
_HEADER = struct.Struct("<QI")
_FOOTER_BYTES = 4
# A length past this is not a record a summary writer made (the largest are images of a few MB): the file is not
# an event file, or it is damaged there, and nothing after it is read.
MAX_RECORD_BYTES = 64 * 1024 * 1024
# TensorFlow's DataType enum (types.proto): the numeric dtypes a scalar summary's tensor may have, each with the
# struct format of one value in tensor_content and the field its values are in otherwise.
_DTYPES = {1: ("<f", "float_val"), 2: ("<d", "double_val"), 3: ("<i", "int_val"), 9: ("<q", "int64_val"),
           19: ("<e", "half_val"), 10: ("?", "bool_val")}
SCALARS_PLUGIN = "scalars"


class DamagedEvents(ValueError):
    """An event file holds a record no summary writer makes (a length past MAX_RECORD_BYTES)."""


def split_records(buf: bytes) -> tuple[list[bytes], int]:
    """The whole records at the start of `buf` (their data) and how many bytes they take: a record still being
    written (its tail not there yet) is left for the next read. The CRCs are not checked: a writer appends whole
    records, and a record's length is known before its data. Raises DamagedEvents at a length no writer makes."""
    records, at = [], 0
    while at + _HEADER.size <= len(buf):
        (length, _) = _HEADER.unpack_from(buf, at)
        if length > MAX_RECORD_BYTES:
            raise DamagedEvents(f"a record of {length} bytes at byte {at}")
        end = at + _HEADER.size + length + _FOOTER_BYTES
        if end > len(buf):
            break
        records.append(bytes(buf[at + _HEADER.size:end - _FOOTER_BYTES]))
        at = end
    return records, at


def first_record_bytes(buf: bytes) -> int | None:
    """The whole size of the record `buf` starts with, from its header (None: not a whole header yet); a reader
    whose buffer is smaller reads that much (an image summary's record can be megabytes)."""
    if len(buf) < _HEADER.size:
        return None
    (length, _) = _HEADER.unpack_from(buf, 0)
    return _HEADER.size + length + _FOOTER_BYTES


def scalars(record: bytes) -> tuple[int, dict[str, float]] | None:
    """(step, {tag: value}) of one event's scalar summaries, or None: an event of no scalar (the file's version
    line, a graph, histograms, images, text). A scalar is `tf.summary.scalar`'s (a 0-d numeric tensor of the
    `scalars` plugin) or TF1's `simple_value`."""
    from tensorboardX.proto import event_pb2  # (protobuf only: no TensorFlow import)

    event = event_pb2.Event.FromString(record)
    if not event.HasField("summary"):
        return None
    found: dict[str, float] = {}
    for value in event.summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            found[value.tag] = float(value.simple_value)
        elif kind == "tensor" and value.metadata.plugin_data.plugin_name in (SCALARS_PLUGIN, ""):
            number = _tensor_scalar(value.tensor)
            if number is not None:
                found[value.tag] = number
    return (int(event.step), found) if found else None


def _tensor_scalar(tensor) -> float | None:
    """A 0-d numeric TensorProto's value (None: a string, a shape, no value)."""
    if tensor.tensor_shape.dim or tensor.dtype not in _DTYPES:
        return None
    fmt, field = _DTYPES[tensor.dtype]
    if tensor.tensor_content:
        if len(tensor.tensor_content) != struct.calcsize(fmt):
            return None
        return float(struct.unpack(fmt, tensor.tensor_content)[0])
    values = getattr(tensor, field)
    if not values:
        return None
    if field == "half_val":  # (float16 in the low bits of an int32: TensorProto's convention)
        return float(struct.unpack("<e", struct.pack("<H", values[0] & 0xFFFF))[0])
    return float(values[0])


def metric_name(folder: str, tag: str) -> str:
    """A scalar's metric name: its tag, after the folder its event file is in below the directory read (TensorBoard
    shows that folder as the run: a `train/` and a `validation/` writing the same tag stay apart)."""
    folder = folder.strip("/").replace("\\", "/")
    return f"{folder}/{tag}" if folder and folder != "." else tag


class StepRows:
    """The scalars read so far, gathered into one row per step. A writer writes a step's scalars one after the
    other and may be caught between two: the rows of every step before the newest one seen are `ready()`; the
    newest waits for a newer step, or for `flush()` once the program has ended. Scalars of a step already given
    (a resumed program writing it again, a second folder) make a row of their own."""

    def __init__(self) -> None:
        self._rows: dict[int, dict[str, float]] = {}

    def add(self, items: Iterable[tuple[int, dict[str, float]]]) -> None:
        for step, values in items:
            self._rows.setdefault(step, {}).update(values)

    def ready(self) -> list[tuple[int, dict[str, float]]]:
        if not self._rows:
            return []
        newest = max(self._rows)
        return self._take([s for s in sorted(self._rows) if s < newest])

    def flush(self) -> list[tuple[int, dict[str, float]]]:
        return self._take(sorted(self._rows))

    def _take(self, steps: list[int]) -> list[tuple[int, dict[str, float]]]:
        return [(s, self._rows.pop(s)) for s in steps]
