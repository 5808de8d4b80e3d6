"""A task's output lines told apart (raytf/_task/lines.py), on lines real runs printed: what the driver shows, what
an error's stderr tail quotes. Pure."""

import io

import pytest

from raytf._core import events as ev
from raytf._task.lines import OWN_FORMAT, Shown, benign, tf_level
from raytf._task.tee import TaskOutput

# What `python -m raytf.launch conf/local.yaml` (and conf/ps_local.yaml) printed on a CPU machine, from every task.
INIT = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
ONEDNN = ("I0000 00:00:1795495795.341762   29698 port.cc:153] oneDNN custom operations are on. You may see slightly "
          "different numerical results due to floating-point round-off errors from different computation orders. "
          "To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.")
NO_CUDA = ("I0000 00:00:1795495795.342911   29698 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU "
           "will not be used.")
CUINIT = ("E0000 00:00:1795495801.816826   29698 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
          "Failed call to cuInit: UNKNOWN ERROR (303)")
GENERATOR = ("W0000 00:00:1795495802.887255   29698 dataset.cc:997] Input of GeneratorDatasetOp::Dataset will not be "
             "optimized because the dataset does not implement the AsGraphDefInternal() method needed to apply "
             "optimizations.")
RENDEZVOUS = ("W0000 00:00:1795496017.877534    7648 local_rendezvous.cc:412] Local rendezvous is aborting with "
              "status: ABORTED: Cleanup -2318848912928884527 [type.googleapis.com/tensorflow.DerivedStatus='']")
SLOW_CALLBACK = ("WARNING:tensorflow:Callback method `on_train_batch_end` is slow compared to the batch time (batch "
                 "time: 0.0025s vs `on_train_batch_end` time: 0.0405s). Check your callbacks.")
NOISE = [INIT, ONEDNN, NO_CUDA, CUINIT, GENERATOR, RENDEZVOUS, SLOW_CALLBACK]
# TF's collective abort (tests/core/test_script_parts.py) and the lines that continue it.
ABORT = ["E0000 00:00:1795469339.751694     695 base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort "
         "UNAVAILABLE: Socket closed",
         "Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
         "/tensorflow.WorkerService/RecvBuf:",
         ":UNKNOWN:Error received from peer  {grpc_message:\"Socket closed\"}"]
# A deprecation warning of TF's Python side, three lines.
DEPRECATION = ["WARNING:tensorflow:From /x/train.py:12: calling Constant.__init__ (from "
               "tensorflow.python.ops.init_ops) with dtype is deprecated and will be removed in a future version.",
               "Instructions for updating:",
               "Call initializer instance with the dtype argument instead of passing it to the constructor"]
# TF's older C++ format (tensorflow/tensorflow#31870).
OLD_FORMAT = ("2019-08-26 11:45:17.907378: I tensorflow/stream_executor/platform/default/dso_loader.cc:44] "
              "Successfully opened dynamic library cudart64_100.dll")
# raytf's own, from the task's `raytf` logger (actor._task_logging) and from a script's child.
OWN_INFO = "INFO raytf._task.context: model exported to /tmp/noise-runs/noise-probe/model"
OWN_WARNING = "WARNING raytf._task.context: save request: no decision from the driver in 120 s; training on"
CHILD_WARNING = ("raytf: /x/exit_on_rank1.py:16 sets TF_CONFIG: ignored. raytf's TF_CONFIG (built from the tasks' "
                 "actual addresses) stays in effect; that line is only needed when launching by hand")
FATAL = "F0000 00:00:1795495801.816826   29698 tensor_shape.cc:45] Check failed: d >= 0 (-1 vs. 0)"
# The program's own.
PROGRAM = ["hello from worker 0", "Epoch 1/3", "20/20 [==============================] - 2s 77ms/step - loss: 2.2886",
           "Traceback (most recent call last):", '  File "/x/train.py", line 3, in <module>',
           "ValueError: bad shape", "I love TF", "E0 is not a log line", ""]


def _shown(shown: Shown, lines: list[str], stream: str = "err") -> list[str]:
    return [text for text in lines if shown(stream, text)]


def test_tf_log_lines_are_known_by_their_format():
    assert [tf_level(t) for t in NOISE] == ["W", "I", "I", "E", "W", "W", "W"]
    assert tf_level(FATAL) == "F" and tf_level(OLD_FORMAT) == "I" and tf_level(DEPRECATION[0]) == "W"
    assert all(tf_level(t) is None for t in [*PROGRAM, OWN_INFO, OWN_WARNING, CHILD_WARNING])


def test_a_streamed_rank_shows_its_program_and_raytf_but_not_tf():
    lines = [*NOISE, PROGRAM[0], *ABORT, PROGRAM[1], *DEPRECATION, PROGRAM[2], OLD_FORMAT, OWN_INFO, *PROGRAM[3:],
             OWN_WARNING, CHILD_WARNING]
    assert _shown(Shown(streamed=True), lines) == [PROGRAM[0], PROGRAM[1], PROGRAM[2], OWN_INFO, *PROGRAM[3:],
                                                   OWN_WARNING, CHILD_WARNING]
    # train.show_tf_logs: everything.
    assert _shown(Shown(streamed=True, tf_logs=True), lines) == lines


def test_other_ranks_show_raytf_warnings_and_last_words_only():
    lines = [*NOISE, *PROGRAM, OWN_INFO, OWN_WARNING, CHILD_WARNING, FATAL, "Fatal Python error: Segmentation fault"]
    expected = [OWN_WARNING, CHILD_WARNING, FATAL, "Fatal Python error: Segmentation fault"]
    assert _shown(Shown(streamed=False), lines) == expected
    assert _shown(Shown(streamed=False, tf_logs=True), lines) == expected


def test_raytf_lines_are_known_by_the_task_loggers_format():
    import logging

    def line(level: int) -> str:
        return logging.Formatter(OWN_FORMAT).format(logging.LogRecord("raytf._task.upload", level, "x.py", 1,
                                                                      "%s was not uploaded", ("ctx.log_dir",), None))

    assert line(logging.WARNING) == "WARNING raytf._task.upload: ctx.log_dir was not uploaded"
    assert Shown(streamed=False)("err", line(logging.WARNING)) and Shown(streamed=False)("err", line(logging.ERROR))
    assert not Shown(streamed=False)("err", line(logging.INFO)) and Shown(streamed=True)("err", line(logging.INFO))


def test_what_continues_a_tf_line_is_told_per_stream():
    shown = Shown(streamed=True)
    assert not shown("err", ABORT[0])
    assert shown("out", "  indented, on stdout")  # stdout's line: not a continuation of stderr's TF line
    assert not shown("err", ABORT[1]) and not shown("err", "  more of TF's message")
    assert shown("err", "Traceback (most recent call last):") and shown("err", '  File "x.py", line 1')


def test_the_stderr_tail_leaves_out_the_start_up_chatter_but_not_errors():
    assert [t for t in NOISE if not benign(t)] == [RENDEZVOUS, SLOW_CALLBACK]
    assert not benign(ABORT[0]) and not benign(FATAL) and not any(benign(t) for t in PROGRAM)


@pytest.mark.parametrize("tf_logs", [False, True])
def test_task_output_logs_everything_and_pushes_what_is_shown(tf_logs):
    pushed = []
    log = io.BytesIO()
    out = TaskOutput(log, lambda kind, p: pushed.append((kind, p)), Shown(streamed=True, tf_logs=tf_logs))
    data = "\n".join([*NOISE, PROGRAM[0], OWN_INFO, ""]).encode()
    chunks = iter([data[:100], data[100:], b""])
    out.read(lambda: next(chunks), "err")
    out.end(ok=True)
    assert log.getvalue() == data
    assert [k for k, _ in pushed] == [ev.OUTPUT]
    expected = [*NOISE, PROGRAM[0], OWN_INFO] if tf_logs else [PROGRAM[0], OWN_INFO]
    assert pushed[0][1]["lines"] == [["err", t] for t in expected]
    assert list(out.stderr_tail) == [RENDEZVOUS, SLOW_CALLBACK, PROGRAM[0], OWN_INFO]
