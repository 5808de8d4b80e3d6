"""raytf's live figures as Ray metrics: a real 2-worker run, scraped on the node's Prometheus endpoint while it goes."""

import os
import threading
import time
import urllib.request

import pytest

import raytf
from tests.conftest import ROOT

# Step 2 (-m slow): a Ray of its own (~30 s with the session's restart after it); the figures' pure parts are
# tests/core/test_ray_metrics.py's.
pytestmark = [pytest.mark.ray, pytest.mark.timeout(150), pytest.mark.slow]

INTERVAL = "RAY_metrics_report_interval_ms"


@pytest.fixture(scope="module")
def ray_local(session_ray):
    """A local Ray of this module's own, like the session's but exporting metrics every 500 ms (Ray's default is
    every 10 s), which only the processes a new Ray starts read."""
    import ray

    session_ray.release()
    os.chdir(ROOT)  # the tasks import tests.* from the driver's working directory
    was = os.environ.get(INTERVAL)
    os.environ[INTERVAL] = "500"  # read by the processes ray.init starts, and by this driver's own core worker
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=True, configure_logging=False, log_to_driver=False)
    finally:
        if was is None:
            os.environ.pop(INTERVAL)
        else:
            os.environ[INTERVAL] = was
    yield ray
    ray.shutdown()


def _scrape(port: int) -> dict[str, list[tuple[dict, float]]]:
    """The endpoint's raytf samples: {name: [(labels, value), ...]}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found: dict[str, list[tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("ray_raytf_"):
                found.setdefault(s.name, []).append((s.labels, s.value))
    return found


def _series(found, name, run):
    return {labels.get("rank"): (labels, value) for labels, value in found.get(name, []) if labels.get("run") == run}


def test_live_figures_reach_the_nodes_metrics_endpoint(ray_local, fast_cfg, no_leaks, tmp_path):
    (node,) = ray_local.nodes()
    port = node["MetricsExportPort"]
    stop = tmp_path / "stop"
    cfg = fast_cfg("run.name=promrun", "train.entrypoint=tests.train_fns:steps_until_told", "train.epochs=1",
                   "checkpoint.every_epochs=0", "checkpoint.export_model=false", "train.params.step_s=0.05",
                   "train.params.max_steps=1200", f"train.params.stop_file={stop}")
    events, outcome = [], {}

    def fit():
        try:
            outcome["result"] = raytf.fit(cfg, quiet=True, on_event=events.append)
        except BaseException as e:  # (the main thread reports it)
            outcome["error"] = e

    runner = threading.Thread(target=fit, name="raytf.fit")
    runner.start()
    wanted = ("ray_raytf_steps_per_s", "ray_raytf_step_time_s", "ray_raytf_input_wait_s", "ray_raytf_examples_per_s")
    found: dict = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and runner.is_alive():
            found = _scrape(port)
            if all(set(_series(found, name, "promrun")) == {"0", "1"} for name in wanted) and \
                    _series(found, "ray_raytf_checkpoint_age_s", "promrun"):
                break
            time.sleep(0.5)  # the next scrape (Ray exports every second here)
    finally:
        stop.touch()
        runner.join(timeout=60)
    assert not runner.is_alive(), "the run did not stop when told"
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert result.status == "succeeded", result.error

    rows = [e for e in events if e.kind == "step"]
    for name in wanted:
        series = _series(found, name, "promrun")
        assert set(series) == {"0", "1"}, (name, sorted(found))
        for labels, value in series.values():
            assert labels["role"] == "worker" and labels["host"] == "127.0.0.1", labels
            assert value >= 0
    for rank, (_, value) in _series(found, "ray_raytf_steps_per_s", "promrun").items():
        # The gauge holds one of the rank's own step rows' steps/s.
        reported = [r.payload["metrics"]["steps_per_s"] for r in rows if str(r.rank) == rank]
        assert any(value == pytest.approx(x, rel=1e-6) for x in reported), (rank, value, reported[-5:])
    for rank, (_, value) in _series(found, "ray_raytf_examples_per_s", "promrun").items():
        reported = [r.payload["metrics"]["steps_per_s"] * 16 * 2 for r in rows if str(r.rank) == rank]
        assert any(value == pytest.approx(x, rel=1e-6) for x in reported), (rank, value, reported[-5:])
    for rank, (_, value) in _series(found, "ray_raytf_step_time_s", "promrun").items():
        assert 0.04 < value < 5, (rank, value)  # steps of 0.05 s
    (attempts,) = [v for labels, v in found["ray_raytf_attempts"] if labels["run"] == "promrun"]
    assert attempts == 1
    (age,) = [v for labels, v in found["ray_raytf_checkpoint_age_s"] if labels["run"] == "promrun"]
    assert 0 <= age < 90

    # The run ended: its series are no longer set, and Ray drops them from the endpoint.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_series(_scrape(port), n, "promrun") for n in wanted):
        time.sleep(0.5)
    assert not any(_series(_scrape(port), n, "promrun") for n in wanted)
