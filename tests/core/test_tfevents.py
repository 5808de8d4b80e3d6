"""A program's tf.summary scalars read without TensorFlow (raytf/_core/tfevents.py; raytf issue 55). The records here
are made with the same protobuf messages TensorFlow writes (tensorboardX ships them) and TensorFlow's framing;
tests/task/test_script_host.py reads files TensorFlow itself wrote."""

import struct

import pytest
from tensorboardX.proto import event_pb2, summary_pb2

from raytf._core import tfevents


def _framed(data: bytes) -> bytes:
    # (CRCs are not checked by the reader: zeros stand for them)
    return struct.pack("<QI", len(data), 0) + data + struct.pack("<I", 0)


def _event(step: int, *values) -> bytes:
    event = event_pb2.Event(step=step, wall_time=1.0, summary=summary_pb2.Summary(value=list(values)))
    return event.SerializeToString()


def _tensor(tag: str, dtype: int, plugin: str = "scalars", dims=(), **fields) -> summary_pb2.Summary.Value:
    from tensorboardX.proto import tensor_pb2, tensor_shape_pb2

    shape = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=d) for d in dims])
    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin))
    return summary_pb2.Summary.Value(tag=tag, metadata=meta,
                                     tensor=tensor_pb2.TensorProto(dtype=dtype, tensor_shape=shape, **fields))


def test_whole_records_are_split_off_and_a_record_being_written_waits():
    a, b = _event(1, summary_pb2.Summary.Value(tag="x", simple_value=1.0)), b"\x08\x02"
    buf = _framed(a) + _framed(b)
    assert tfevents.split_records(buf) == ([a, b], len(buf))
    for cut in (3, 12, len(_framed(a)) + 13, len(buf) - 1):  # inside a header, the data, the footer
        records, used = tfevents.split_records(buf[:cut])
        assert used <= cut and records == [a, b][:len(records)] and used == sum(len(_framed(r)) for r in records)
    assert tfevents.split_records(b"") == ([], 0)


def test_a_length_no_writer_makes_is_damage():
    with pytest.raises(tfevents.DamagedEvents, match="bytes at byte 0"):
        tfevents.split_records(struct.pack("<QI", tfevents.MAX_RECORD_BYTES + 1, 0) + b"x" * 20)


def test_scalars_of_tf2_tensors_and_tf1_simple_values():
    record = _event(40,
                    _tensor("loss", 1, tensor_content=struct.pack("<f", 0.5)),  # float32, as tf.summary.scalar
                    _tensor("lr", 2, double_val=[0.001]),  # float64 in its field
                    _tensor("images_seen", 9, int64_val=[1280]),
                    _tensor("half", 19, half_val=[struct.unpack("<H", struct.pack("<e", 1.5))[0]]),
                    summary_pb2.Summary.Value(tag="acc", simple_value=0.75))  # TF1's tf.compat.v1.summary.scalar
    assert tfevents.scalars(record) == (40, {"loss": 0.5, "lr": 0.001, "images_seen": 1280.0, "half": 1.5,
                                             "acc": 0.75})


def test_what_is_not_a_scalar_is_left_out():
    assert tfevents.scalars(event_pb2.Event(step=0, file_version="brain.Event:2").SerializeToString()) is None
    record = _event(3,
                    _tensor("hist", 1, dims=(2,), float_val=[1.0, 2.0]),  # a vector
                    _tensor("text", 7, plugin="text", string_val=[b"hello"]),  # a string
                    _tensor("img", 1, plugin="images", float_val=[1.0]),  # another plugin's
                    _tensor("empty", 1))  # no value
    assert tfevents.scalars(record) is None


@pytest.mark.parametrize("folder, tag, name", [(".", "loss", "loss"), ("", "loss", "loss"),
                                               ("train", "loss", "train/loss"),
                                               ("validation/", "accuracy", "validation/accuracy"),
                                               ("a\\b", "t", "a/b/t")])
def test_metric_names_keep_the_folder_tensorboard_shows_as_the_run(folder, tag, name):
    assert tfevents.metric_name(folder, tag) == name


def test_rows_wait_for_a_newer_step_or_the_end():
    rows = tfevents.StepRows()
    rows.add([(10, {"loss": 1.0})])
    assert rows.ready() == []  # step 10's other scalars may follow
    rows.add([(10, {"lr": 0.1}), (20, {"loss": 0.5})])
    assert rows.ready() == [(10, {"loss": 1.0, "lr": 0.1})]
    rows.add([(20, {"lr": 0.05})])
    assert rows.ready() == []
    assert rows.flush() == [(20, {"loss": 0.5, "lr": 0.05})]
    assert rows.flush() == [] and rows.ready() == []
    rows.add([(10, {"validation/acc": 0.9})])  # a step given already (a second folder read later): a row of its own
    assert rows.flush() == [(10, {"validation/acc": 0.9})]
