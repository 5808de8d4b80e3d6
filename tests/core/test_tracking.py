"""Experiment tracking's pure parts (raytf._core.tracking and .outbox, the tracking.* keys): the config as params
with its secrets masked, metric names and points (epochs averaged over ranks), the outbox and the back-off; and the
one-line error when MLflow is missing."""

import importlib.util

import pytest

import raytf
from raytf._core import events as ev
from raytf._core import tracking as tr
from raytf._core import tracking_outbox as ob
from raytf.config import redacted, task_view, to_dict
from raytf.errors import ConfigError
from tests.conftest import ROOT


def _event(kind, rank, attempt=1, t=100.0, **payload):
    return ev.Event(kind, "worker", rank, attempt, payload, time=t)


# -- params ---------------------------------------------------------------------------------------------------------

def test_flatten_gives_one_param_per_leaf():
    params = tr.flatten({"cluster": {"num_workers": 2, "port_range": None}, "train": {"args": ["--a", "1"],
                         "params": {}, "name": "x" * 7000}})
    assert params["cluster.num_workers"] == "2"
    assert params["cluster.port_range"] == "null"
    assert params["train.args"] == '["--a", "1"]'
    assert params["train.params"] == "{}"
    assert len(params["train.name"]) == tr.MAX_PARAM_VALUE and params["train.name"].endswith("...")


def test_params_carry_no_secret():
    # The same masking as config.yaml: a secret-named runtime_env variable, a secret flag's value in train.args, a
    # password in the tracking URI itself.
    cfg = raytf.load_config(ROOT / "conf/script.yaml", [
        "ray.runtime_env.env_vars.HF_TOKEN=hf-planted-secret-1", "train.args=[--api-key,planted-secret-2]",
        "tracking.mlflow.uri=postgresql://me:planted-secret-3@db/mlflow", "tracking.mlflow.tags.team=vision"])
    params = tr.flatten(to_dict(redacted(cfg)))
    text = repr(params)
    for secret in ("hf-planted-secret-1", "planted-secret-2", "planted-secret-3"):
        assert secret not in text
    assert params["ray.runtime_env.env_vars.HF_TOKEN"] == "***"
    assert params["train.args"] == '["--api-key", "***"]'
    assert params["tracking.mlflow.tags.team"] == "vision"
    assert params["cluster.num_workers"] == "2"


def test_changed_params_keep_the_first_value():
    new, changed = tr.changed_params({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"})
    assert new == {"c": "4"}
    assert changed == {"b": "2 -> 3"}
    assert tr.changed_tag(changed) == "b: 2 -> 3"


# -- metrics --------------------------------------------------------------------------------------------------------

def test_epochs_are_averaged_over_the_ranks_that_train():
    s = tr.MetricStream(grace_s=30)
    # Both ranks train (their step rows say so); the epoch waits for rank 1's row.
    out = s.add([_event(ev.STEP, 0, epoch=1, step=1, metrics={"loss": 2.0, "step_time_s": 0.1}),
                 _event(ev.STEP, 1, epoch=1, step=1, metrics={"loss": 2.0, "step_time_s": 0.3, "gpu0_util": 50}),
                 _event(ev.EPOCH, 0, epoch=1, step=4, metrics={"loss": 1.0, "accuracy": 0.5})], now=100.0)
    assert sorted((p.key, p.value, p.step) for p in out) == [
        ("rank0/step_time_s", 0.1, 1), ("rank1/gpu0_util", 50.0, 1), ("rank1/step_time_s", 0.3, 1),
        ("step/loss", 2.0, 1)]  # rank 0's model metrics at the global step; every rank's timing, per rank
    out = s.add([_event(ev.EPOCH, 1, t=101.0, epoch=1, step=4, metrics={"loss": 3.0, "accuracy": 0.7})], now=101.0)
    assert sorted((p.key, round(p.value, 6), p.step, p.timestamp_ms) for p in out) == [
        ("accuracy", 0.6, 1, 101000), ("loss", 2.0, 1, 101000)]


def test_an_epoch_waits_no_longer_than_its_grace_nor_past_its_attempt():
    s = tr.MetricStream(grace_s=30)
    s.add([_event(ev.HEARTBEAT, 1, epoch=1, step=0)], now=100.0)  # rank 1 trains, and never reports epochs
    assert s.add([_event(ev.EPOCH, 0, epoch=1, step=4, metrics={"loss": 1.0})], now=100.0) == []
    assert [p.key for p in s.add([], now=131.0)] == ["loss"]  # the grace is over: rank 0's alone
    assert s.add([_event(ev.EPOCH, 0, t=132.0, epoch=2, step=8, metrics={"loss": 0.5})], now=132.0) == []
    # A retry's first event: the failed attempt's epochs go out as they are; the new attempt counts anew.
    out = s.add([_event(ev.EPOCH, 0, attempt=2, t=140.0, epoch=2, step=8, metrics={"loss": 0.4})], now=140.0)
    assert [(p.key, p.value, p.step) for p in out] == [("loss", 0.5, 2), ("loss", 0.4, 2)]
    assert s.add([_event(ev.EPOCH, 1, attempt=1, epoch=3, step=12, metrics={"loss": 9.0})], now=141.0) == []


def test_eval_rows_and_metric_names():
    s = tr.MetricStream()
    out = s.add([ev.Event(ev.EVAL, "evaluator", 3, 1, {"epoch": 2, "step": 8, "metrics": {"loss": 0.2}})], now=0)
    assert [(p.key, p.step) for p in out] == [("eval_loss", 2)]
    assert s.trainers == set()  # the evaluator trains nothing: epochs never wait for it
    assert tr.metric_key("val acc@top5") == "val acc_top5"
    assert tr.metric_key("a..b") == "a.b"
    assert tr.metric_key("/x//./y/../z/") == "x/y/z"  # a normalised path, as MLflow wants
    assert len(tr.metric_key("k" * 300)) == 250
    assert "train.params.learning rate_" in tr.flatten({"train": {"params": {"learning rate?": 1}}})


def test_attempt_tags_say_cause_and_decision():
    tags = tr.attempt_tags({"attempt": 2, "status": "failed", "cause": "system", "decision": "retry",
                            "reason": "a lost peer", "rank": 1, "resize": None})
    assert tags == {"raytf.attempt.2.status": "failed", "raytf.attempt.2.cause": "system",
                    "raytf.attempt.2.decision": "retry", "raytf.attempt.2.reason": "a lost peer",
                    "raytf.attempt.2.rank": "1"}


# -- sending --------------------------------------------------------------------------------------------------------

def test_outbox_sends_params_then_tags_then_points_within_mlflows_limits():
    box = ob.TrackingOutbox(max_points=2500)
    box.params.update({f"p{i}": str(i) for i in range(150)})
    box.tags.update({"t": "1"})
    box.add_points(tr.Point("loss", float(i), i, i) for i in range(2600))
    assert box.dropped == 100 and len(box.points) == 2500  # the oldest went
    sizes = []
    while box:
        b = box.take()
        sizes.append((len(b.params), len(b.tags), len(b.points)))
    assert sizes == [(100, 0, 0), (50, 0, 0), (0, 1, 0), (0, 0, 1000), (0, 0, 1000), (0, 0, 500)]


def test_outbox_requeues_in_front_and_keeps_newer_tags():
    box = ob.TrackingOutbox()
    box.tags["status"] = "running"
    box.add_points([tr.Point("a", 1.0, 1, 1)])
    first = box.take()
    box.tags["status"] = "succeeded"  # came while the batch was out
    box.requeue(first)
    assert box.tags == {"status": "succeeded"}
    box.add_points([tr.Point("a", 2.0, 2, 2)])
    batch = box.take()
    box.requeue(batch)
    assert [p.value for p in box.points] == [1.0, 2.0]


def test_backoff_warns_once_and_doubles_up_to_its_cap():
    b = ob.Backoff(first_s=1.0, max_s=4.0)
    assert b.due(0.0) and not b.down
    assert b.failed(10.0) is True  # the one warning
    assert not b.due(10.5) and b.due(11.0)
    assert [b.failed(t) for t in (11.0, 13.0, 17.0)] == [False, False, False]
    assert b.next_at == 21.0  # 1, 2, 4, then capped at 4
    assert b.succeeded() is True and not b.down and b.due(0.0)
    assert b.succeeded() is False
    assert b.failed(30.0) is False  # once per run, even after it came back


def test_permanent_errors_are_the_requests_fault():
    assert ob.permanent("INVALID_PARAMETER_VALUE")
    assert not ob.permanent("INTERNAL_ERROR") and not ob.permanent(None)


def test_names_and_places():
    assert tr.mlflow_status("succeeded") == "FINISHED"
    assert tr.mlflow_status("interrupted") == "KILLED"
    assert tr.mlflow_status("failed") == "FAILED"
    assert tr.experiment_name(None) == tr.experiment_name("  ") == "raytf"
    assert tr.absolute_sqlite("sqlite:///m.db", "/work/x") == "sqlite:////work/x/m.db"
    assert tr.absolute_sqlite("sqlite:////abs/m.db", "/w") == "sqlite:////abs/m.db"
    assert tr.absolute_sqlite("http://h:5000", "/w") == "http://h:5000"
    assert tr.local_artifact_root("sqlite:////abs/dir/m.db") == "/abs/dir/mlartifacts"
    assert tr.local_artifact_root("http://h:5000") is None
    assert tr.run_key("/runs/a") != tr.run_key("/runs/b") and len(tr.run_key("/runs/a")) == 32


# -- config ---------------------------------------------------------------------------------------------------------

def test_tracking_keys_defaults_and_experiment_from_the_file():
    cfg = raytf.load_config(ROOT / "conf/local.yaml", ["tracking.mlflow.uri=http://127.0.0.1:5000"])
    assert cfg.tracking.mlflow.experiment == "local"
    assert cfg.tracking.flush_timeout_s == 30.0 and cfg.tracking.mlflow.tags == {}
    assert raytf.load_config({"train": {"entrypoint": "a.b:c"}}).tracking.mlflow.experiment is None
    named = raytf.load_config(ROOT / "conf/local.yaml", ["tracking.mlflow.experiment=mine"])
    assert named.tracking.mlflow.experiment == "mine"
    # The tasks never see it (a database URI may hold a password).
    assert task_view(cfg).tracking.mlflow.uri == ""


@pytest.mark.parametrize("override, match", [
    ("tracking.mlflow.uri=./mlruns", r"tracking.mlflow.uri \('./mlruns'\) is a directory.*sqlite:////"),
    ("tracking.mlflow.uri=file:///tmp/mlruns", "MLflow's file store"),
    ("tracking.mlflow.uri=sqlite://m.db", "must name a file"),
    ("tracking.mlflow.experiment=' '", "tracking.mlflow.experiment is blank"),
    ("tracking.flush_timeout_s=-1", r"tracking.flush_timeout_s \(-1\.0\) must be a finite number 0 or more"),
])
def test_bad_tracking_keys_are_one_line(override, match):
    with pytest.raises(ConfigError, match=match) as info:
        raytf.load_config(ROOT / "conf/local.yaml", [override])
    assert "\n" not in str(info.value)


def test_databricks_uri_is_accepted():
    assert raytf.load_config(ROOT / "conf/local.yaml", ["tracking.mlflow.uri=databricks"]).tracking.mlflow.uri


def test_mlflow_missing_is_one_line_and_exit_2(monkeypatch, capsys):
    from raytf import launch
    from raytf._driver import tracking

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.startswith("mlflow") else
                        real(name, *a))
    with pytest.raises(ConfigError, match=r"MLflow is not installed here. Fix: pip install 'raytf\[mlflow\]'"):
        tracking.check_installed("http://127.0.0.1:5000")
    # The CLI: before Ray starts, exit 2, one line.
    assert launch.main([str(ROOT / "conf/local.yaml"), "tracking.mlflow.uri=http://127.0.0.1:5000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("raytf: config error: tracking.mlflow.uri is set") and "\n" not in err


def test_a_database_uri_with_mlflow_skinny_only(monkeypatch):
    import os

    from raytf._driver import tracking

    if importlib.util.find_spec("mlflow") is None:
        pytest.skip("MLflow is not installed (pip install -e '.[test]')")
    real = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: False if p.endswith("sqlalchemy_store.py") else real(p))
    with pytest.raises(ConfigError, match="needs the full MLflow package"):
        tracking.check_installed("sqlite:////tmp/x.db")
    tracking.check_installed("http://127.0.0.1:5000")  # a server: the client is enough
