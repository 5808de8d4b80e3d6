"""The TensorBoard files the driver writes (raytf/_driver/sinks.py): each record's CRCs computed by the `crc32c` C
extension, which tensorboardX uses when it can import it (in pure Python they took a fifth of a core of the
driver's loop at 512 ranks' rows: benchmarks.scale, raytf issue 38), and checked by TensorBoard's own reader."""

import struct


def test_records_are_checksummed_natively_and_read_back_whole(tmp_path):
    import tensorboardX.crc32c
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
    from tensorboardX.proto.event_pb2 import Event

    from raytf import _storage as storage
    from raytf._core import events as ev
    from raytf._driver.sinks import TensorBoardSink

    assert tensorboardX.crc32c._crc32c_native is not None, "tensorboardX computes CRCs in pure Python: crc32c missing"
    sink = TensorBoardSink(storage.RunDir(str(tmp_path / "runs"), "r"))
    for step in (4, 8, 12):
        sink(ev.Event(ev.STEP, "worker", 1, 1, {"epoch": 1, "step": step, "metrics": {"loss": 1.0 / step,
                                                                                     "step_time_s": 0.02}}))
    sink.close()
    (path,) = (tmp_path / "runs" / "r" / "tensorboard" / "worker1").glob("events*")
    # TensorBoard's reader (without TensorFlow) checks both CRCs of every record; a wrong one raises DataLossError.
    reader = pywrap_tensorflow.PyRecordReader_New(str(path))
    events = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        events.append(Event.FromString(reader.record()))
    rows = [(e.step, {v.tag: round(v.simple_value, 4) for v in e.summary.value}) for e in events if e.summary.value]
    assert rows == [(4, {"step/loss": 0.25, "step/step_time_s": 0.02}), (8, {"step/loss": 0.125,
                    "step/step_time_s": 0.02}), (12, {"step/loss": 0.0833, "step/step_time_s": 0.02})]
    # A record whose data was changed after its CRC: the reader says so (the check above is a real one).
    data = bytearray(path.read_bytes())
    length = struct.unpack("<Q", data[:8])[0]
    data[12 + length - 1] ^= 0xFF  # the first record's last byte of data
    path.write_bytes(bytes(data))
    bad = pywrap_tensorflow.PyRecordReader_New(str(path))
    try:
        bad.GetNext()
    except errors.DataLossError:
        pass
    else:
        raise AssertionError("a corrupted record was read without a CRC error")
