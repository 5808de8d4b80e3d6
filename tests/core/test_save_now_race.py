"""A task's save-now follower (raytf/_task/control.py) and its training thread (TrainContext.step_end) drive the
same requests from two threads (raytf issue 33): a request that arrives while the training thread is finishing the
one before must stay pending, never be reset with it. The two threads are interleaved deterministically: the fake
bus hands the listener each request when the test says, and the training thread is held at the moment it compares
its step with the agreed one until the listener has taken the next request. No sleeps, no Ray (a fake `ray.get`)."""

import queue
import sys
import threading
import types

from raytf._core.events import SavePhase, SaveRequest
from raytf._storage import RunDir
from raytf._task.context import TrainContext
from raytf.config import load_config

WAIT_S = 30.0  # a deadline for each hand-over, not a pause: every wait returns as soon as its event is set


class FakeBus:
    """The event bus' save-now side as a task's listener sees it: wait_control returns the next state the test
    put, or the current one after its timeout; report_step records each report and signals it."""

    def __init__(self) -> None:
        self.states: queue.Queue = queue.Queue()
        self.current = SaveRequest()
        self.reports: dict[int, int] = {}  # version -> the step reported
        self.reported = {v: threading.Event() for v in (1, 2, 3)}
        self.wait_control = types.SimpleNamespace(remote=self._wait_control)
        self.report_step = types.SimpleNamespace(remote=self._report_step)

    def _wait_control(self, known, timeout):
        try:
            self.current = self.states.get(timeout=timeout)
        except queue.Empty:
            pass
        return self.current

    def _report_step(self, version, rank, step):
        self.reports[version] = step
        self.reported[version].set()

    def pause(self, version: int) -> None:
        self.states.put(SaveRequest(version, SavePhase.PAUSE))

    def decide(self, version: int, save_at: int) -> None:
        self.states.put(SaveRequest(version, SavePhase.DECIDED, save_at=save_at))


# Where the training thread compares its step with the agreed one, once the decision is in: TrainContext's before
# the fix, the save-now follower's after.
COMPARES = ("_on_save_request", "follow")


class HeldContext(TrainContext):
    """A TrainContext whose training thread, the first time it reads its step to compare it with the agreed one,
    waits until `before_compare` has run."""

    before_compare = None

    @property
    def step(self):
        hook, caller = self.before_compare, sys._getframe(1).f_code.co_name
        if hook is not None and caller in COMPARES and threading.current_thread() is self.trainer:
            self.before_compare = None
            hook()
        return self._step

    @step.setter
    def step(self, value):
        self._step = value


def _context(tmp_path, monkeypatch, bus: FakeBus) -> HeldContext:
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(get=lambda ref, **kw: ref))
    cfg = load_config({"train": {"entrypoint": "m:f", "epochs": 1, "steps_per_epoch": 100},
                       "metrics": {"every_steps": 0}, "storage": {"path": str(tmp_path / "runs")},
                       "checkpoint": {"every_epochs": 0}})
    ctx = HeldContext(cfg=cfg, strategy=types.SimpleNamespace(num_replicas_in_sync=1), role="worker", index=0,
                      rank=0, is_chief=True, num_workers=1, attempt=1, run_dir=RunDir(cfg.storage, "race"),
                      emit=lambda kind, payload: None, resume_from=None, scratch_dir=str(tmp_path), bus=bus)
    ctx.trainer = threading.current_thread()
    return ctx


def test_a_save_request_that_arrives_while_the_last_is_finished_stays_pending(tmp_path, monkeypatch):
    bus = FakeBus()
    ctx = _context(tmp_path, monkeypatch, bus)
    try:
        bus.pause(1)
        assert bus.reported[1].wait(WAIT_S) and ctx._control.pending
        bus.decide(1, save_at=1)

        def second_request_arrives():
            # The decision of request 1 is in and the training thread is about to finish with it: request 2 comes.
            bus.pause(2)
            assert bus.reported[2].wait(WAIT_S)

        ctx.before_compare = second_request_arrives
        ctx.step_end()  # step 1: request 1's agreed step (no writer registered: nothing to save)
        assert ctx.before_compare is None, "the training thread never compared its step with the agreed one"
        assert bus.reports == {1: 0, 2: 1}
        assert ctx._control.pending, "request 2 was lost: the training thread reset it with request 1"
        bus.decide(2, save_at=3)
        ctx.step_end()  # step 2: request 2 decided at step 3, train on
        assert ctx._control.pending
        ctx.step_end()  # step 3: its agreed step
        assert not ctx._control.pending
    finally:
        ctx.close()
        bus.states.put(bus.current)  # (the listener returns from its wait and sees it is closed)
