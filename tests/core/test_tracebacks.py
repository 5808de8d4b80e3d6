"""A failure told in a few lines (raytf/_core/tracebacks.py, raytf issue 54): never the data its message dumps."""

import os
import sysconfig

from raytf._core import tracebacks as tb

# Keras 3's Model.fit under MultiWorkerMirroredStrategy (TF 2.21, Keras 3.15): the input batch, dumped in the message.
_ROW = "         0.6593295 , 0.04910266],"
DUMP = "\n".join([
    "Attempt to convert a value (PerReplica:{",
    "  0: <tf.Tensor: shape=(16, 28, 28), dtype=float32, numpy=",
    "array([[[0.16302916, 0.48977396, 0.24736027, ..., 0.3877416 ,",
    *([_ROW, "        [0.48897132, 0.84517586, 0.6382194 , ..., 0.33778223,"] * 20),
    "",
    "       ...,",
    "",
    "       [[0.6199427 , 0.15246694, 0.6500394 , ..., 0.6498775 ,",
    "         0.0668555 , 0.80646753]]], shape=(16, 28, 28), dtype=float32)>",
    "}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.",
])
SITE = sysconfig.get_paths()["purelib"]
FRAMES = [tb.Frame("/home/me/train.py", 13, "<module>", "model.fit(ds, epochs=2)"),
          tb.Frame(os.path.join(SITE, "keras", "src", "utils", "traceback_utils.py"), 122, "error_handler", "raise e"),
          tb.Frame("<frozen runpy>", 88, "_run_code")]


def test_a_dumped_tensor_is_left_out_of_the_summary_which_keeps_the_point_and_the_users_frames():
    own = tb.own_frames(FRAMES, tb.library_dirs())
    assert own == FRAMES[:1]  # (an installed package's and frozen code's frames are not the user's)
    text = tb.summary("ValueError", DUMP, own)
    lines = text.splitlines()
    assert lines[0] == "ValueError: Attempt to convert a value (PerReplica:{"
    assert lines[1] == "  0: <tf.Tensor: shape=(16, 28, 28), dtype=float32, values left out>"
    assert lines[2].startswith("}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>)")
    assert "more line(s) of the message in the task's log" in lines[3]
    assert lines[4] == 'File "/home/me/train.py", line 13, in <module>: model.fit(ds, epochs=2)'
    assert len(lines) == 5 and "0.6593295" not in text and len(text) <= tb.MAX_CHARS


def test_short_messages_stay_whole_and_long_ones_are_bounded():
    assert tb.summary("KeyError", "'loss'") == "KeyError: 'loss'"
    assert tb.summary("SystemExit", "") == "SystemExit"
    many = "\n".join(f"line {i}" for i in range(10))
    assert tb.message_lines(many) == ["line 0", "line 1", "line 9",
                                      "... (7 more line(s) of the message in the task's log)"]
    huge = tb.summary("RuntimeError", "x" * 5000)
    assert len(huge) <= tb.MAX_CHARS and huge.endswith("…")


def test_a_dead_scripts_stderr_tail_and_the_terminals_traceback_leave_the_values_out():
    tail = ["Traceback (most recent call last):", '  File "/home/me/train.py", line 13, in <module>',
            "    model.fit(ds, epochs=2)", f"ValueError: {DUMP}"]
    shown = tb.tail_lines("\n".join(tail).splitlines())
    assert not any("0.6593295" in line for line in shown)
    assert any(line.startswith("... (") and "line(s) of values left out" in line for line in shown)
    assert shown[-1].startswith("}) with an unsupported type")
    bounded = tb.bounded_traceback("\n".join(tail)).splitlines()
    assert bounded[:3] == tail[:3]  # the frames as they are
    assert bounded[3] == "ValueError: Attempt to convert a value (PerReplica:{"
    assert "0.6593295" not in "\n".join(bounded)
