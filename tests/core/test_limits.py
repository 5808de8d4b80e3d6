"""Bounds on what a task, or the program it runs, can send (raytf issue 19): the event bus per rank, pushes in
flight, output lines and flushes, the stderr tail, metric names. Pure: no Ray, no child process."""

import logging
import os
import threading
import tracemalloc

import pytest

import raytf
from raytf._core import events as ev
from raytf._core import failure, limits
from raytf._core.plan import TaskSpec
from raytf._core.progress import StepCounter
from raytf._task.lines import AbortNoise
from raytf._task.script.host import ScriptHost
from raytf._task.script.reporter import ScriptReporter
from tests.conftest import ROOT


def _step(rank: int, step: int, **metrics) -> ev.Event:
    return ev.Event(ev.STEP, "worker", rank, 1, {"epoch": 1, "step": step, "metrics": metrics or {"loss": 0.5}})


def test_a_flood_of_step_rows_is_bounded_and_keeps_every_fact():
    """30k step rows, 15 times the bus' bound per rank (and heartbeats and output), from one rank between two
    drains: the bus holds its bound, the latest row (progress, the hang watch), every epoch and checkpoint in order,
    and counts what it dropped; a rank under its bound loses nothing."""
    buf = ev.EventBuffer()
    tracemalloc.start()
    try:
        for step in range(1, 30_001):
            batch = [_step(1, step), ev.Event(ev.HEARTBEAT, "worker", 1, 1, {"epoch": 1, "step": step})]
            if step % 3_000 == 0:
                batch.append(ev.Event(ev.EPOCH, "worker", 1, 1, {"epoch": step // 3_000, "step": step,
                                                                  "metrics": {"loss": 0.1}}))
                batch.append(ev.Event(ev.CHECKPOINT, "worker", 1, 1, {"epoch": step // 3_000, "step": step}))
            if step % 10 == 0:
                batch.append(ev.Event(ev.OUTPUT, "worker", 1, 1, {"lines": [["out", f"step {step}"]] * 3}))
            if step % 100 == 0:
                batch.append(_step(0, step))
            buf.push(batch)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 8 * 1024 * 1024  # (1.2 MiB here; what 30k events would take is over 15 MiB)
    out = buf.drain(0)
    mine = [e for e in out if e.rank == 1 and e.kind != ev.DROPPED]
    steps = [e.payload["step"] for e in mine if e.kind == ev.STEP]
    assert len(steps) <= ev.MAX_EVENTS_PER_RANK + 1 and steps[-1] == 30_000  # the latest, in the last slot
    assert [e.payload["step"] for e in mine if e.kind == ev.HEARTBEAT] == [30_000]  # one beat, the latest
    epochs = [e.payload["epoch"] for e in mine if e.kind == ev.EPOCH]
    assert epochs == list(range(1, 11)) and [e.payload["epoch"] for e in mine if e.kind == ev.CHECKPOINT] == epochs
    assert len(mine) <= ev.MAX_EVENTS_PER_RANK + 2 + 20
    (dropped,) = [e for e in out if e.kind == ev.DROPPED]
    outputs = sum(len(e.payload["lines"]) for e in mine if e.kind == ev.OUTPUT)
    assert (dropped.rank, dropped.role, dropped.attempt) == (1, "worker", 1)
    assert dropped.payload["steps"] + len(steps) == 30_000
    assert dropped.payload["output_lines"] + outputs == 9_000
    assert [e.payload["step"] for e in out if e.rank == 0] == list(range(100, 30_001, 100))  # every row
    # The next drains hold room again, and say nothing until more is dropped.
    buf.push([_step(1, 30_001)])
    assert [e.kind for e in buf.drain(0)] == [ev.STEP]
    buf.push([_step(1, s) for s in range(ev.MAX_EVENTS_PER_RANK + 5)])
    again = [e for e in buf.drain(0) if e.kind == ev.DROPPED]
    assert again[0].payload["steps"] == dropped.payload["steps"] + 4  # cumulative


def test_the_bus_bounds_bytes_too_and_never_drops_facts():
    buf = ev.EventBuffer(max_events=1000, max_bytes=64 * 1024)
    big = {f"metric_{i:03d}": 1.0 for i in range(200)}  # ~5 KiB a row
    buf.push([_step(0, s, **big) for s in range(1, 101)])
    buf.push([ev.Event(ev.EPOCH, "worker", 0, 1, {"epoch": 1, "step": 100, "metrics": big}),
              ev.Event(ev.BUSY, "worker", 0, 1, {"what": "uploading", "allow_s": 30.0}),
              ev.Event(ev.PREEMPTED, "worker", 0, 1, {"step": 100})])
    out = buf.drain(0)
    rows = [e for e in out if e.kind == ev.STEP]
    assert sum(ev.payload_bytes(e.payload) for e in rows[:-1]) <= 64 * 1024 and rows[-1].payload["step"] == 100
    assert [e.kind for e in out if e.kind not in (ev.STEP, ev.DROPPED)] == [ev.EPOCH, ev.BUSY, ev.PREEMPTED]


def test_the_driver_says_once_per_attempt_what_the_bus_dropped(caplog):
    from raytf._driver.sinks import Progress

    progress = Progress(epochs=1, steps_per_epoch=None, batch_size=None, quiet=True)
    with caplog.at_level(logging.WARNING, logger="raytf"):
        for steps in (10, 20):
            progress(ev.Event(ev.DROPPED, "worker", 1, 2, {"steps": steps, "output_lines": 3}))
    (line,) = [r.getMessage() for r in caplog.records]
    assert "attempt 2: worker 1 sends events faster" in line and "dropped 10 of its step rows" in line


class FakeBus:
    """A bus for limits.EventOutbox: pushes are numbered; a push has landed once its number is in `landed`."""

    def __init__(self) -> None:
        self.pushes: list[list] = []
        self.landed: set[int] = set()
        self.waits: list[tuple[int, float]] = []

    def send(self, events: list) -> int:
        self.pushes.append(list(events))
        return len(self.pushes) - 1

    def wait(self, refs, n, timeout):
        self.waits.append((n, timeout))
        ready = [r for r in refs if r in self.landed][:n]
        return ready, [r for r in refs if r not in ready]

    def outbox(self, **kw) -> limits.EventOutbox:
        return limits.EventOutbox(self.send, self.wait, droppable=lambda e: e.startswith("step"), size=len, **kw)


def test_events_go_at_once_while_the_bus_keeps_up():
    bus = FakeBus()
    box = bus.outbox()
    for i in range(5):
        assert box.put(f"step{i}") == i  # sent at once; the push to watch
        bus.landed.add(i)
        assert box.landed(i) is None  # nothing waited for it
    assert bus.pushes == [[f"step{i}"] for i in range(5)]
    assert bus.waits == []  # never waited: no delay added


def test_events_wait_for_the_push_in_flight_then_go_as_one():
    """Behind (a push in flight): the events that come meanwhile go together, in order, once it lands -- not one
    push each, which is what outran the bus at 512 ranks (raytf issue 38)."""
    bus = FakeBus()
    box = bus.outbox()
    assert box.put("step0") == 0 and bus.pushes == [["step0"]]
    for i in range(1, 10):
        assert box.put(f"step{i}") is None  # push 0 in flight: held
    assert len(bus.pushes) == 1 and box.pending == [f"step{i}" for i in range(1, 10)]
    assert box.landed(7) is None and len(bus.pushes) == 1  # not the push in flight: nothing
    assert box.landed(0) == 1  # the batch went; the next to watch
    assert bus.pushes == [["step0"], [f"step{i}" for i in range(1, 10)]] and box.pending == []
    assert box.put("epoch") is None and box.put("step10") is None  # push 1 in flight
    assert len(bus.pushes) == 2  # the landing, not the next event, sends the batch
    assert box.landed(1) == 2 and bus.pushes[-1] == ["epoch", "step10"]
    assert box.landed(2) is None and box.inflight is None
    assert box.put("step11") == 3 and bus.pushes[-1] == ["step11"]  # caught up: at once again
    assert bus.waits == []


def test_never_two_pushes_in_flight_so_order_holds():
    """Ray runs a threaded actor's calls in no guaranteed order: a second push in flight could overtake the
    first (it did: a batch through the object store overtaken by the small one after it)."""
    bus = FakeBus()
    box = bus.outbox(max_events=4, max_bytes=10_000, wait_s=0.5)
    box.put("step0")
    for i in range(1, 4):
        assert box.put(f"step{i}") is None
    bus.landed.add(0)  # landed, its callback not yet run
    assert box.put("step4") == 1  # a full batch waits for the push in flight, then goes
    assert bus.waits == [(1, 0.5)] and bus.pushes[-1] == ["step1", "step2", "step3", "step4"]
    assert box.landed(0) is None  # the late callback of the push already waited for: nothing
    box.put("x" * 20_000)  # past max_bytes: waits too
    assert bus.waits[-1] == (1, 0.5)


def test_a_bus_that_takes_nothing_loses_only_droppable_events():
    bus = FakeBus()
    box = bus.outbox(max_events=2, wait_s=0.5)
    box.put("step0")
    box.put("step1")
    assert box.put("epoch") is None  # full; push 0 never lands within wait_s: the step row goes, the epoch waits
    assert box.dropped == 1 and box.pending == ["epoch"] and len(bus.pushes) == 1
    box.put("step2")
    assert box.dropped == 2 and box.pending == ["epoch"]
    bus.landed.add(0)
    assert box.landed(0) == 1 and bus.pushes[-1] == ["epoch"]


def test_take_sends_what_waits_after_the_push_in_flight():
    bus = FakeBus()
    box = bus.outbox()
    assert box.take(5.0) == (None, None)  # nothing at all
    box.put("step0")
    assert box.take(5.0) == (0, None)  # nothing waits: wait for push 0
    box.put("step1")
    box.put("checkpoint")
    assert box.take(5.0) == (1, 1)  # waited for push 0 first, then sent what waited; watch it
    assert bus.waits == [(1, 5.0)] and bus.pushes[-1] == ["step1", "checkpoint"]
    assert box.pending == [] and box.landed(0) is None


def test_a_line_is_cut_never_held_whole():
    cutter = limits.LineCutter(max_line=1024)
    out = []
    for _ in range(1024):  # a 64 MiB line, 64 KiB at a time
        out += cutter.feed(b"x" * 65536)
        assert len(cutter._head) <= 1024
    out += cutter.feed(b"tail\nshort\nnext")
    assert out == [(b"x" * 1024, 64 * 1024 * 1024 + 4 - 1024), (b"short", 0)]
    assert cutter.end() == [(b"next", 0)] and cutter.end() == []


def test_the_stderr_tail_is_bounded_by_bytes_and_lines():
    tail = limits.Tail()
    for i in range(30):
        tail.append(f"{i:02d} " + "E" * 64 * 1024)
    assert tail.bytes <= limits.TAIL_BYTES and len("\n".join(tail).encode()) <= limits.TAIL_BYTES
    assert len(tail) == 8  # each line cut to an eighth of the bytes: the lines before a long one stay
    last = list(tail)[-1]
    assert last.startswith("29 EEE") and "more bytes not shown" in last and len(last) < limits.TAIL_BYTES // 8
    for i in range(30):
        tail.append(f"ValueError: {i}")
    assert list(tail) == [f"ValueError: {i}" for i in range(10, 30)]  # 20 lines at most
    assert limits.clip("é" * 10, 100) == "é" * 10
    clipped = limits.clip("x" * 500 + "END", 200, keep_end=True)
    assert clipped.endswith("END") and len(clipped.encode()) <= 200


def test_abort_noise_holds_a_bounded_number_of_lines():
    noise = AbortNoise(max_held=5)
    noise.feed("err", "E0000 00:00:1.0 1 base_collective_executor.cc:252] StartAbort UNAVAILABLE: closed")
    for _ in range(10_000):
        assert noise.feed("err", "") == []
    assert len(noise.held) == 5
    out = noise.end(ok=False)
    assert len(out) == 6 and "9996 more lines of TF's log not shown" in out[-1][1]


def test_metric_names_are_capped_before_a_row_leaves_the_task():
    sent = []
    counter = StepCounter(lambda k, p: sent.append(p), every_steps=1, heartbeat_s=60, max_names=4)
    counter.report({"loss": 1.0, "acc": 0.5})
    counter.report({"loss": 1.0, "val_loss": 2.0, "lr": 0.1})  # 4 names: the cap itself
    with pytest.raises(limits.TooManyMetrics) as info:
        counter.report({f"class_{i}_recall": 0.0 for i in range(300)})
    message = str(info.value)
    assert "\n" not in message and message.startswith("metrics.max_names: the program reported 304 distinct")
    assert "metrics.max_names=4" in message and "'class_0_recall', 'class_1_recall', 'class_2_recall', ..." in message
    assert "Fix:" in message and len(sent) == 2  # the row with too many was never sent
    # A deterministic error of the program: never retried, even with retry_user_errors after progress.
    verdict = failure.decide(kind=failure.USER, error_type="TooManyMetrics", attempt=2, progressed=True,
                             failures_so_far=0, cfg=raytf.load_config(ROOT / "conf/local.yaml",
                                                                      ["failure.retry_user_errors=true"]).failure)
    assert verdict.decision is failure.Decision.RAISE


def test_a_script_past_max_names_fails_in_the_child_and_in_the_host(tmp_path):
    r, w = os.pipe()
    rep = ScriptReporter(w, every_steps=1, heartbeat_s=60, is_chief=False, checkpoint_dir=str(tmp_path),
                         scratch=str(tmp_path), max_names=2)
    with pytest.raises(limits.TooManyMetrics):
        rep.report_explicit({"a": 1, "b": 2, "c": 3}, step=1, epoch=None, kind="step", checkpoint=False)
    os.close(r)
    os.close(w)
    # A script that writes its events pipe itself: the host (in the actor) checks, and stops it.
    cfg = raytf.load_config(ROOT / "conf/script.yaml", ["metrics.max_names=3"])
    emitted = []
    host = ScriptHost(cfg=cfg, spec=TaskSpec(role="worker", index=0, rank=0, cpus=1, gpus=0), run_dir=None,
                      emit=lambda k, p: emitted.append(k), attempt=1, is_chief=False, scratch=str(tmp_path),
                      log_file=None, stream=False)
    r, w = os.pipe()
    reader = threading.Thread(target=host._read_events, args=(r,))
    reader.start()
    os.write(w, b'{"kind": "step", "step": 1, "epoch": 1, "metrics": {"a": 1, "b": 2}}\n')
    os.write(w, b"{" + b" " * (limits.MAX_EVENT_LINE_BYTES + 10) + b"}\n")  # skipped, never held whole
    os.write(w, b'{"kind": "step", "step": 2, "epoch": 1, "metrics": {"c": 1, "d": 2}}\n')
    os.close(w)
    reader.join(30)
    assert emitted == [ev.STEP] and isinstance(host.error, limits.TooManyMetrics)


def test_a_task_log_is_streamed_to_an_object_store(tmp_path):
    """tee.OutputCapture's upload (an object store): RunDir.upload_file copies a chunk at a time, never the file
    whole."""
    import pyarrow.fs as pafs

    from raytf._storage import RunDir

    log = tmp_path / "task.log"
    with open(log, "wb") as f:
        for i in range(64):
            f.write(bytes([65 + i % 26]) * 65536)
    run_dir = RunDir(str(tmp_path / "runs"), "r")
    mock = pafs._MockFileSystem()
    writes = []

    class _Spy:
        def __getattr__(self, name):
            return getattr(mock, name)

        def open_output_stream(self, path, *args, **kwargs):
            stream = mock.open_output_stream(path, *args, **kwargs)

            class _Out:
                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    stream.close()

                def write(self, data):
                    writes.append(len(data))
                    return stream.write(data)

            return _Out()

    run_dir.fs, run_dir._local = _Spy(), False
    run_dir.upload_file(str(log), "logs/worker0-attempt1.log", retry=False, chunk=256 * 1024)
    with mock.open_input_stream(run_dir.path("logs/worker0-attempt1.log")) as f:
        assert f.read() == log.read_bytes()
    assert len(writes) == 16 and max(writes) == 256 * 1024
