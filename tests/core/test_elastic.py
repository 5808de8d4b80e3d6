"""Elastic training's pure decisions (raytf/_core/elastic.py) and the attempt loop's grow (attempt_loop.on_grow):
which sizes are tried, the batch each trains with, the attempt's config, the resize budget, and how a grow
stops the group (a save at an agreed step, or the next committed checkpoint)."""

import pytest

from raytf._core import elastic, failure
from raytf._core import events as ev
from raytf._core.attempt_drive import drive
from raytf._core.attempt_loop import AttemptLoop, Finished
from raytf._core.attempt_record import Cause, Done, Stopped
from raytf._core.budget import FailureBudget
from raytf.config import load_config
from tests.core.test_attempt_loop import TIMING, FakeGroup, step


def run_loop(group: FakeGroup, grow) -> AttemptLoop:
    loop = AttemptLoop(primary={0: "worker", 1: "worker"}, background={}, timing=TIMING, attempt=1, now=0.0)
    drive(loop, group, lambda events: None, poll_s=1.0, clock=group.clock, grow=grow)
    return loop


def cfg(*overrides):
    return load_config("conf/local.yaml", ["cluster.num_workers=4", "train.batch_size=6", *overrides])


def test_not_elastic_unless_min_workers_is_below_num_workers():
    assert not elastic.is_elastic(cfg())
    assert not elastic.is_elastic(cfg("cluster.min_workers=4"))
    assert elastic.is_elastic(cfg("cluster.min_workers=2"))
    assert elastic.sizes(cfg()).tried == (4,)


def test_sizes_run_from_the_full_size_down_to_min_workers():
    assert elastic.sizes(cfg("cluster.min_workers=1")) == elastic.Sizes((4, 3, 2, 1), ())


def test_batch_per_replica_by_default_and_kept_global_on_request():
    c = cfg("cluster.min_workers=1")
    assert [elastic.per_replica_batch(c, n) for n in (4, 3, 2, 1)] == [6, 6, 6, 6]
    keep = cfg("cluster.min_workers=1", "cluster.elastic.keep_global_batch=true")
    # The global batch is 6 x 4 = 24 at every size: 8 x 3, 12 x 2, 24 x 1.
    assert [elastic.per_replica_batch(keep, n) for n in (4, 3, 2, 1)] == [6, 8, 12, 24]
    odd = cfg("cluster.min_workers=1", "cluster.elastic.keep_global_batch=true", "train.batch_size=5")
    assert elastic.sizes(odd) == elastic.Sizes((4, 2, 1), (3,))  # 20 does not divide among 3


def test_an_attempts_config_has_its_size_and_batch_and_the_runs_is_untouched():
    keep = cfg("cluster.min_workers=2", "cluster.elastic.keep_global_batch=true")
    three = elastic.sized(keep, 3)
    assert (three.cluster.num_workers, three.train.batch_size) == (3, 8)
    assert (keep.cluster.num_workers, keep.train.batch_size) == (4, 6)
    assert elastic.sized(keep, 4) is keep
    with pytest.raises(ValueError):
        elastic.sized(cfg("cluster.min_workers=1", "cluster.elastic.keep_global_batch=true", "train.batch_size=5"), 3)


def test_resizes_are_bounded_and_grow_saves_now_only_where_it_can():
    c = cfg("cluster.min_workers=2", "cluster.elastic.max_resizes=2")
    assert [FailureBudget(0, 0, max_resizes=2, resizes=n).may_resize() for n in (0, 1, 2)] == [True, True, False]
    assert FailureBudget.of(c).max_resizes == 2
    assert elastic.grows_by_saving_now(c, script=False)
    assert not elastic.grows_by_saving_now(c, script=True)
    ps = cfg("cluster.min_workers=2", "cluster.strategy=parameter_server", "cluster.num_ps=1")
    assert not elastic.grows_by_saving_now(ps, script=False)  # the chief saves on its own schedule


def test_a_resize_is_retried_and_never_counts_as_a_failure():
    verdict = failure.decide(kind=failure.RESIZE, error_type="", attempt=1, progressed=True, failures_so_far=99,
                             cfg=cfg("failure.max_failures=0").failure)
    assert verdict.decision is failure.Decision.RETRY


def test_grow_saves_at_an_agreed_step_then_stops():
    asked = []

    def grow(now):
        if not asked and now >= 3:
            asked.append(now)
            return True
        return None

    group = FakeGroup([([step(0, 5), step(1, 5)], []), ([], []), ([], []), ([], []),
                       ([], [Finished(0), Finished(1)])], reports={0: 7, 1: 8})
    loop = run_loop(group, grow=grow)
    assert ("ask_save", 2) in group.calls and ("decide", 9) in group.calls
    assert loop.end == Stopped(Cause.RESIZE, saved=True) and loop.end.cause == failure.RESIZE


def test_grow_without_save_now_waits_for_the_next_commit():
    commit = ev.Event(ev.CHECKPOINT, "worker", 0, 1, {"epoch": 1, "step": 10, "seq": 1})
    group = FakeGroup([([step(0, 5)], []), ([], []), ([commit], [])])
    loop = run_loop(group, grow=lambda now: False)
    assert not [c for c in group.calls if c[0] == "ask_save"]
    assert loop.end == Stopped(Cause.RESIZE, saved=True) and loop.end.cause == failure.RESIZE


def test_no_grow_asked_keeps_training_to_the_end():
    group = FakeGroup([([step(0, 5), step(1, 5)], []), ([], [Finished(0), Finished(1)])])
    loop = run_loop(group, grow=lambda now: None)
    assert loop.end == Done()
