"""The one progress counter both TrainContext and a script's reporter are (StepCounter), and `raytf.report`'s
dispatch to the process's sink."""

import pytest

import raytf
from raytf._core.progress import StepCounter, scalar, scalars
from raytf._task import report as reporting


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return _Clock()


def test_rows_every_n_steps_heartbeats_between(clock):
    sent = []
    c = StepCounter(lambda kind, payload: sent.append((kind, payload)), every_steps=4, heartbeat_s=1.0,
                    epoch=1, step=10, clock=clock)
    for _ in range(8):
        clock.now += 0.5
        c.step_end({"loss": 1.5})
    steps = [(p["epoch"], p["step"]) for k, p in sent if k == "step"]
    # The first step of a process is always reported (launch-to-first-step); then every 4 steps. Step rows
    # carry the epoch under way (1-based): two epochs done, the third running.
    assert steps == [(2, 11), (2, 12), (2, 16)]
    rows = [p for k, p in sent if k == "step"]
    assert rows[1]["metrics"] == {"loss": 1.5, "steps_per_s": pytest.approx(2.0)}
    beats = [p for k, p in sent if k == "heartbeat"]
    # At most every heartbeat_s, counted from the last thing sent: 1 s after the rows at steps 12 and 16.
    assert [(b["epoch"], b["step"]) for b in beats] == [(2, 14), (2, 18)]
    c.epoch_end({"loss": 1.0})
    assert sent[-1] == ("epoch", {"epoch": 2, "step": 18, "metrics": {"loss": 1.0}})
    assert (c.epoch, c.step) == (2, 18)


def test_steps_in_groups_report_when_a_multiple_is_crossed(clock):
    sent = []
    c = StepCounter(lambda kind, payload: sent.append((kind, payload)), every_steps=10, heartbeat_s=60,
                    clock=clock)
    for _ in range(5):
        clock.now += 1
        c.step_end(steps=3)  # Keras with steps_per_execution=3 skips exact multiples of 10
    assert [p["step"] for k, p in sent if k == "step"] == [3, 12]
    assert c.step == 15 and c.steps_per_s(12) == {}  # 12 -> 15 crosses no multiple of 10: no rate due
    clock.now += 1
    c.step = 21
    assert c.steps_per_s(15) == {"steps_per_s": pytest.approx(9 / 2)}  # 12 -> 21 over the 2 s since the row


def test_scalars_keep_numbers_and_drop_the_rest():
    class Tensorish:
        def numpy(self):
            return 2.5

    assert scalar(3) == 3.0 and scalar(Tensorish()) == 2.5 and scalar("x") is None
    assert scalars({"a": 1, "b": "text", 7: Tensorish()}) == {"a": 1.0, "7": 2.5}


def test_report_goes_to_this_processs_sink_and_nowhere_outside_raytf():
    got = []

    class Sink:
        def report_explicit(self, metrics, *, step, epoch, kind, checkpoint):
            got.append((metrics, step, epoch, kind, checkpoint))

    raytf.report({"loss": 1.0})  # no sink: a script run by hand
    reporting.set_sink(Sink())
    try:
        raytf.report({"loss": 1.0}, step=3)
        raytf.report({"acc": 0.5}, epoch=2, kind="epoch", checkpoint=True)
        with pytest.raises(ValueError, match="kind"):
            raytf.report({"loss": 1.0}, kind="eval")
    finally:
        reporting.set_sink(None)
    assert got == [({"loss": 1.0}, 3, None, "step", False), ({"acc": 0.5}, None, 2, "epoch", True)]


def test_progress_lines_show_each_fit_its_own_epochs(caplog):
    """A program's second Model.fit counts its epochs on from the first's (epoch 3, 4 of the run): the progress
    line shows it as that fit's 1/2 and 2/2, not 3/2; a script that counts no steps shows none."""
    import logging

    from raytf._core import events as ev
    from raytf._driver.sinks import Progress

    p = Progress(epochs=None, steps_per_epoch=None, batch_size=None, quiet=True)
    caplog.set_level(logging.INFO, logger="raytf")

    def epoch(n, step, fit=None):
        p(ev.Event(ev.EPOCH, "worker", 0, 1, {"epoch": n, "step": step, "fit": fit, "metrics": {"loss": 0.5}}))

    epoch(1, 0)  # a custom loop's raytf.report(kind="epoch"): no fit, no steps
    p(ev.Event(ev.STARTED, "worker", 0, 1, {"replicas": 2, "epochs": 2, "steps_per_epoch": 5, "fit": 1,
                                              "base_epoch": 0, "base_step": 0}))
    epoch(2, 10, fit=1)
    p(ev.Event(ev.STARTED, "worker", 0, 1, {"replicas": 2, "epochs": 2, "steps_per_epoch": 5, "fit": 2,
                                              "base_epoch": 2, "base_step": 10}))
    epoch(3, 15, fit=2)
    epoch(4, 20, fit=2)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["epoch 1: loss=0.5", "epoch 2/2 step 10: loss=0.5", "fit 2 · epoch 1/2 step 15: loss=0.5",
                     "fit 2 · epoch 2/2 step 20: loss=0.5"]


def test_progress_shows_the_attempts_size_when_elastic(caplog):
    """Elastic (min_workers below the size wanted): `· 2/3 workers` after the epoch, and examples/s from the
    attempt's replicas and per-replica batch; a run that is not elastic reads as before."""
    import logging

    from raytf._core import events as ev
    from raytf._driver.sinks import Progress

    caplog.set_level(logging.INFO, logger="raytf")

    def run(p, attempt, replicas, epoch, step):
        p(ev.Event(ev.STARTED, "worker", 0, attempt, {"replicas": replicas}))
        p(ev.Event(ev.EPOCH, "worker", 0, attempt, {"epoch": epoch, "step": step,
                                                     "metrics": {"loss": 0.5, "steps_per_s": 2.0}}))

    p = Progress(epochs=3, steps_per_epoch=10, batch_size=16, quiet=True)
    p.start_attempt(3, wanted=3, min_workers=2, batch_size=16)
    run(p, 1, 3, 1, 10)
    p.start_attempt(2, wanted=3, min_workers=2, batch_size=24)  # keep_global_batch: 16 x 3 = 24 x 2
    run(p, 2, 2, 2, 20)
    p.start_attempt(3, wanted=3, min_workers=2, batch_size=16)
    run(p, 3, 3, 3, 30)
    plain = Progress(epochs=3, steps_per_epoch=10, batch_size=16, quiet=True)
    plain.start_attempt(2, wanted=2, min_workers=2, batch_size=16)
    run(plain, 1, 2, 1, 10)
    assert [r.getMessage() for r in caplog.records] == [
        "epoch 1/3 step 10 · 3/3 workers: loss=0.5 ex/s=96",
        "epoch 2/3 step 20 · 2/3 workers: loss=0.5 ex/s=96",
        "epoch 3/3 step 30 · 3/3 workers: loss=0.5 ex/s=96",
        "epoch 1/3 step 10: loss=0.5 ex/s=64"]


def test_a_new_size_starts_a_new_bar():
    from raytf._core import events as ev
    from raytf._driver.sinks import Progress

    p = Progress(epochs=2, steps_per_epoch=10, batch_size=None, quiet=True)
    p.bars = True  # as on a terminal
    try:
        p.start_attempt(3, wanted=3, min_workers=2)
        p(ev.Event(ev.STEP, "worker", 0, 1, {"epoch": 1, "step": 4, "metrics": {"loss": 1.0}}))
        assert p._bar.desc == "epoch 1/2 · 3/3 workers"
        p.start_attempt(3, wanted=3, min_workers=2)  # a retry at the same size: the bar goes on
        assert p._bar is not None
        p.start_attempt(2, wanted=3, min_workers=2)
        assert p._bar is None
        p(ev.Event(ev.STEP, "worker", 0, 2, {"epoch": 1, "step": 3, "metrics": {"loss": 1.0}}))
        assert p._bar.desc == "epoch 1/2 · 2/3 workers" and p._bar.n == 3
    finally:
        p.close()


def test_step_rows_carry_the_breakdown_of_their_own_interval(clock):
    """The first row of a process carries none (its interval holds building and tracing); later rows split their
    interval's time; an epoch's end starts the next interval (validation is in no row, its save in the next)."""
    from raytf._core.breakdown import Split

    spent = {"input_wait_s": 0.0, "save_s": 0.0}
    sent = []
    c = StepCounter(lambda kind, payload: sent.append((kind, payload)), every_steps=2, heartbeat_s=100.0,
                    clock=clock)
    c.split = Split(lambda: dict(spent))
    clock.now += 5.0  # building the model, tracing the first step
    spent["input_wait_s"] += 1.0
    c.step_end()
    for _ in range(2):  # 2 steps of 0.5 s, 0.1 s of each waiting for input
        clock.now += 0.5
        spent["input_wait_s"] += 0.1
        c.step_end()
    rows = [p["metrics"] for k, p in sent if k == "step"]
    assert set(rows[0]) == {"steps_per_s"}  # the process's first row
    assert rows[1] == pytest.approx({"steps_per_s": 2.0, "step_time_s": 0.5, "input_wait_s": 0.1, "save_s": 0.0,
                                     "compute_s": 0.4})
    clock.now += 30.0  # validation after the epoch's last step
    c.epoch_end()
    spent["save_s"] += 0.2  # the epoch's checkpoint, written after its row
    clock.now += 0.2
    clock.now += 0.5
    c.step_end()  # step 4: a row, over the one step since the epoch's end
    last = [p["metrics"] for k, p in sent if k == "step"][-1]
    assert last == pytest.approx({"steps_per_s": 1 / 0.7, "step_time_s": 0.7, "input_wait_s": 0.0, "save_s": 0.2,
                                  "compute_s": 0.5})


def test_a_split_with_nothing_measured_gives_step_time_only():
    """A step fed tensors (no get_next to wait in), or ParameterServerStrategy's: no part is guessed."""
    from raytf._core.breakdown import Split

    assert Split(dict).row(1.0, 10) == {"step_time_s": 0.1}
    assert Split(dict).row(1.0, 0) == {}


def test_a_value_no_float_holds_is_dropped_with_one_warning_naming_it(caplog):
    """A complex number or an int past float's range in a report failed the training step (TypeError,
    OverflowError: raytf issue 71): now dropped, said once per name, the other metrics kept."""
    import logging

    from raytf._core import progress

    progress._said.clear()  # (said once per process: this test's names afresh)
    with caplog.at_level(logging.WARNING, logger="raytf"):
        for _ in range(3):
            assert progress.scalars({"phase": 1 + 2j, "count": 10**400, "loss": 0.5, "n": 3}) == {"loss": 0.5, "n": 3.0}
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert said[0].startswith("metric 'phase': its complex value (1+2j) is no real number a float can hold: dropped")
    assert said[1].startswith("metric 'count': its int value 1000") and len(said[1]) < 200
