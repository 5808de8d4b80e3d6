"""raytf's live figures as Ray gauges (raytf/_driver/raymetrics.py), with a fake Gauge class: no Ray."""

import logging

import pytest

from raytf._core import events as ev
from raytf._core.tasks import TaskInfo
from raytf._driver.raymetrics import GAUGES, RayMetrics

TASKS = [TaskInfo(role="worker", index=i, rank=i, host=f"10.0.0.{i + 1}", port=None, node_id="n", pid=1)
         for i in range(2)]


class FakeGauge:
    """ray.util.metrics.Gauge's face: what was set, per series, in order; tags checked against tag_keys as Ray
    does (a missing or unknown key raises)."""

    made: dict[str, "FakeGauge"] = {}

    def __init__(self, name, description="", tag_keys=None):
        self.name, self.description, self.tag_keys = name, description, tuple(tag_keys or ())
        self.sets: list[tuple[dict, float]] = []
        FakeGauge.made[name] = self

    def set(self, value, tags=None):
        assert isinstance(value, float)
        assert set(tags) == set(self.tag_keys), (self.name, tags)
        assert all(isinstance(v, str) for v in tags.values())
        self.sets.append((dict(tags), value))

    def last(self, **tags):
        found = [v for t, v in self.sets if all(t.get(k) == w for k, w in tags.items())]
        return found[-1] if found else None


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def gauges():
    FakeGauge.made = {}
    return FakeGauge.made


def _step(rank, **metrics):
    return ev.Event(ev.STEP, "worker", rank, 1, {"epoch": 1, "step": 8, "metrics": {"loss": 0.5, **metrics}})


def _sink(clock=None, batch_size=16):
    sink = RayMetrics("r1", gauge=FakeGauge, clock=clock or Clock())
    sink.start_attempt(1, TASKS, batch_size=batch_size)
    sink(ev.Event(ev.STARTED, "worker", 0, 1, {"replicas": 2}))
    sink(ev.Event(ev.STARTED, "worker", 1, 1, {"replicas": 2}))
    return sink


def test_step_rows_become_tagged_gauges(gauges):
    sink = _sink()
    assert set(gauges) == set(GAUGES) and all(g.name.startswith("raytf_") for g in gauges.values())
    assert gauges["raytf_steps_per_s"].tag_keys == ("run", "rank", "role", "host")
    assert gauges["raytf_gpu_util"].tag_keys == ("run", "rank", "role", "host", "device")
    assert gauges["raytf_attempts"].sets == [({"run": "r1"}, 1.0)]
    sink(_step(0, steps_per_s=4.0, step_time_s=0.25, input_wait_s=0.05, collective_s=0.1, gpu0_util=80.0,
               gpu1_util=60.0, gpu0_mem_gib=3.5))
    sink(_step(1, steps_per_s=3.0, step_time_s=0.3, input_wait_s=0.01))
    rank0 = {"run": "r1", "rank": "0", "role": "worker", "host": "10.0.0.1"}
    assert gauges["raytf_steps_per_s"].sets[0] == (rank0, 4.0)
    assert gauges["raytf_step_time_s"].last(rank="0") == 0.25 and gauges["raytf_step_time_s"].last(rank="1") == 0.3
    assert gauges["raytf_input_wait_s"].last(rank="1", host="10.0.0.2") == 0.01
    # examples/s: the rank's steps/s x per-replica batch x replicas in sync.
    assert gauges["raytf_examples_per_s"].last(rank="0") == 4.0 * 16 * 2
    assert gauges["raytf_examples_per_s"].last(rank="1") == 3.0 * 16 * 2
    assert gauges["raytf_gpu_util"].sets == [({**rank0, "device": "0"}, 80.0), ({**rank0, "device": "1"}, 60.0)]
    assert gauges["raytf_gpu_mem_gib"].sets == [({**rank0, "device": "0"}, 3.5)]
    assert gauges["raytf_checkpoint_age_s"].sets == []  # none committed yet: no age, not a made-up one
    # The model's own metrics (loss) are not exported.
    assert not any("loss" in name for name in gauges)


def test_script_mode_has_no_examples_per_s(gauges):
    sink = _sink(batch_size=None)
    sink(_step(0, steps_per_s=4.0))
    assert gauges["raytf_steps_per_s"].last(rank="0") == 4.0
    assert gauges["raytf_examples_per_s"].sets == []


def test_examples_per_s_waits_for_the_replicas_and_follows_each_attempts_batch(gauges):
    sink = RayMetrics("r1", gauge=FakeGauge, clock=Clock())
    sink.start_attempt(1, TASKS, batch_size=16)
    sink(_step(0, steps_per_s=4.0))
    assert gauges["raytf_examples_per_s"].sets == []  # the replicas in sync are not known yet
    # Elastic training keeping the global batch: the next attempt, smaller, has a larger per-replica batch.
    sink.start_attempt(2, TASKS[:1], batch_size=32)
    sink(ev.Event(ev.STARTED, "worker", 0, 2, {"replicas": 1}))
    sink(_step(0, steps_per_s=2.0))
    assert gauges["raytf_examples_per_s"].last(rank="0") == 2.0 * 32 * 1
    assert gauges["raytf_attempts"].last(run="r1") == 2.0


def test_checkpoint_age_is_refreshed_on_the_drivers_poll(gauges):
    clock = Clock(1000.0)
    sink = _sink(clock)
    sink(ev.Event(ev.CHECKPOINT, "worker", 0, 1, {"epoch": 1, "step": 8, "uri": "x"}, time=998.0))
    assert gauges["raytf_checkpoint_age_s"].sets == [({"run": "r1"}, 2.0)]
    clock.t = 1010.0
    sink.poll()
    assert gauges["raytf_checkpoint_age_s"].last(run="r1") == 12.0
    clock.t = 1010.5  # within refresh_s (1 s) of the last refresh: not set again
    sink.poll()
    assert len(gauges["raytf_checkpoint_age_s"].sets) == 2
    sink(ev.Event(ev.CHECKPOINT, "worker", 0, 1, {"epoch": 2, "step": 16, "uri": "y"}, time=1010.5))
    clock.t = 1013.0
    sink.poll()
    assert gauges["raytf_checkpoint_age_s"].last(run="r1") == 2.5


def test_poll_sets_every_live_series_again_and_drops_the_last_attempts_ranks(gauges):
    # Ray 2.60 drops a gauge's series two export intervals after its last set: a rank reporting every minute
    # would flicker out of the endpoint between its rows.
    clock = Clock(1000.0)
    sink = _sink(clock)
    sink(_step(1, steps_per_s=3.0))
    clock.t += 5
    sink.poll()
    assert [v for t, v in gauges["raytf_steps_per_s"].sets if t["rank"] == "1"] == [3.0, 3.0]
    assert gauges["raytf_attempts"].sets[-1] == ({"run": "r1"}, 1.0)
    # A new attempt without rank 1 (elastic shrink): its series is no longer set, so it leaves the endpoint.
    sink.start_attempt(2, TASKS[:1], batch_size=16)
    before = len(gauges["raytf_steps_per_s"].sets)
    clock.t += 5
    sink.poll()
    assert len(gauges["raytf_steps_per_s"].sets) == before
    assert gauges["raytf_attempts"].sets[-1] == ({"run": "r1"}, 2.0)
    # The run's end: nothing is set any more.
    sink.close()
    counts = {name: len(g.sets) for name, g in gauges.items()}
    clock.t += 5
    sink.poll()
    assert {name: len(g.sets) for name, g in gauges.items()} == counts


def test_disabled_by_the_key(gauges):
    sink = RayMetrics("r1", enabled=False, gauge=FakeGauge, clock=Clock())
    sink.start_attempt(1, TASKS, batch_size=16)
    sink(_step(0, steps_per_s=4.0))
    sink.poll()
    assert gauges == {}


def test_no_ray_metrics_never_breaks_the_run(gauges, caplog):
    def broken(*args, **kwargs):
        raise ImportError("no module named 'opentelemetry'")

    sink = RayMetrics("r1", gauge=broken, clock=Clock())
    with caplog.at_level(logging.WARNING, logger="raytf"):
        sink.start_attempt(1, TASKS, batch_size=16)
        sink.start_attempt(2, TASKS, batch_size=16)
        sink(_step(0, steps_per_s=4.0))
        sink.poll()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "opentelemetry" in lines[0] and "goes on without them" in lines[0]


def test_a_failing_set_turns_them_off_once(gauges, caplog):
    sink = _sink()

    def refuse(value, tags=None):
        raise ValueError("Missing value for tag key(s): host.")

    gauges["raytf_steps_per_s"].set = refuse
    with caplog.at_level(logging.WARNING, logger="raytf"):
        sink(_step(0, steps_per_s=4.0, step_time_s=0.25))
        sink(_step(1, steps_per_s=4.0, step_time_s=0.25))
        sink.poll()
    assert [r.getMessage() for r in caplog.records if "raytf_steps_per_s" in r.getMessage()] != []
    assert len(caplog.records) == 1
    assert gauges["raytf_step_time_s"].sets == []
