"""Experiment tracking in MLflow (tracking.mlflow): the session's keras_run in a `sqlite:///` store (the default
run); in CI's second step, a real `mlflow server` (SQLite backend, local artefact root, on 127.0.0.1, one for the
module): a run with a killed worker and a relaunch as one MLflow run, a sweep's trials as child runs, the server
down at start and coming back, a server that never answers; and no secret anywhere in the tracking store."""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import raytf
from raytf._core import events as ev
from raytf._driver import figures

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600),
              pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                                 reason="MLflow is not installed (pip install -e '.[test]')")]


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _same(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """The same steps, and values equal to float precision (pytest.approx takes no list of pairs)."""
    return [s for s, _ in got] == [s for s, _ in expected] and \
        [v for _, v in got] == pytest.approx([v for _, v in expected])


def _artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    return {a.path for a in client.list_artifacts(run_id, path)}


# -- the default run: the session's keras_run, tracked in a sqlite:/// store ------------------------------------------

def test_a_run_is_one_mlflow_run_with_its_params_curves_and_artefacts(keras_run):
    uri = keras_run.config.tracking.mlflow.uri
    assert uri.startswith("sqlite:///"), "keras_run is tracked when MLflow is installed (tests/conftest.py)"
    client = _client(uri)
    run_id = keras_run.mlflow_run_id
    assert run_id and raytf.load_result(keras_run.run_dir).mlflow_run_id == run_id
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "keras3"
    assert client.get_experiment(run.info.experiment_id).name == "local"  # conf/local.yaml's name
    assert len(client.search_runs([run.info.experiment_id], f"tags.`raytf.run_dir` = '{keras_run.run_dir}'")) == 1

    params, tags = run.data.params, run.data.tags
    assert (params["cluster.num_workers"], params["train.epochs"], params["train.entrypoint"]) == (
        "2", "3", "examples.keras_cnn:train")
    assert params["tracking.mlflow.uri"] == uri
    assert tags["raytf.status"] == "succeeded" and tags["raytf.strategy"] == "multi_worker_mirrored"
    assert tags["raytf.run_name"] == "keras3" and tags["raytf.run_dir"] == keras_run.run_dir
    assert tags["raytf.version"] and tags["raytf.attempt.1.status"] == "succeeded"

    # Epochs: the learning curves' numbers (each epoch's metrics averaged over both ranks), step = epoch.
    df = keras_run.metrics
    epochs = df[df["kind"] == "epoch"]
    assert set(epochs["rank"]) == {0, 1}
    curves = figures.learning_curves(keras_run.metrics_table)
    for name in ("loss", "accuracy", "val_loss"):
        assert _same(_history(client, run_id, name), [(int(e), float(v)) for e, v in curves[name].items()]), name
        assert [s for s, _ in _history(client, run_id, name)] == [1, 2, 3]
    # Steps at the rate reported: rank 0's model metrics, every rank's step time, step = the global step.
    steps = df[df["kind"] == "step"]
    for rank in (0, 1):
        mine = steps[steps["rank"] == rank].dropna(subset=["step_time_s"]).sort_values("step")
        assert _same(_history(client, run_id, f"rank{rank}/step_time_s"),
                     list(zip(mine["step"].astype(int), mine["step_time_s"].astype(float))))
    assert [s for s, _ in _history(client, run_id, "step/loss")] == sorted(
        steps[steps["rank"] == 0]["step"].astype(int))

    files = _artifacts(client, run_id)
    assert {"learning_curves.png", "ranks.png", "result.json", "config.yaml", "model"} <= files, files
    assert "model/saved_model.pb" in _artifacts(client, run_id, "model")


# -- CI's second step: a real MLflow server ---------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server` with a SQLite backend and a local artefact root on 127.0.0.1, in a process group of its own
    (stopped by its pid: uvicorn's workers go with it). Started in the background (`start`: ~20 s on a quiet
    machine, 45 s seen on a busy one), waited for by the first test that needs it (`up`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(root / "server.log", "wb") as log:  # (the server keeps its own copy of the descriptor)
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                 "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port",
                 str(self.port), "--workers", "1"], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def up(self) -> MlflowServer:
        try:
            self._wait_up(time.monotonic() + 240)
        except BaseException:  # (not started, or Ctrl-C: stopped all the same)
            self.stop()
            raise
        return self

    def _wait_up(self, deadline: float) -> None:
        while True:
            assert self.proc.poll() is None, (self.root / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "mlflow server did not start"
            time.sleep(0.5)  # (polling a process that cannot tell us: its health endpoint, with a deadline)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def _mlflow_server_starting(tmp_path_factory):
    """The module's server, started as the module's first test begins (whichever it is) and waited for only by the
    tests that use it: the module's first test trains meanwhile."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _start_the_server_early(request):
    """Every test of this module in a run that has tests needing the server starts it (once), in the background."""
    if any("mlflow_server" in item.fixturenames for item in request.session.items):
        request.getfixturevalue("_mlflow_server_starting")


@pytest.fixture
def mlflow_server(_mlflow_server_starting):
    return _mlflow_server_starting.up()


class LateProxy:
    """A port that refuses connections (a tracker that is down) until `open()`, then forwards each to `target`."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        self.port = self.sock.getsockname()[1]
        self.opened = threading.Event()
        self._threads: list[threading.Thread] = []

    def open(self) -> None:
        if self.opened.is_set():
            return
        self.sock.listen(64)
        self.opened.set()
        self._spawn(self._accept)

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self._threads.append(t)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self._spawn(self._pump, client, upstream)
            self._spawn(self._pump, upstream, client)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def _kill_rank1_after_first_commit(run: str):
    """on_event: kills worker 1 (a lost task: a retried failure) once attempt 1 committed its first checkpoint."""
    killed = []

    def on_event(e: ev.Event) -> None:
        if e.kind == ev.CHECKPOINT and e.attempt == 1 and not killed:
            import ray

            ray.kill(ray.get_actor(f"raytf:{run}:worker:1"), no_restart=True)
            killed.append(e.payload["uri"])

    return on_event, killed


# (The tests without the server first: it starts in the background meanwhile.)
@pytest.mark.slow  # ~25 s
def test_a_tracker_that_never_answers_costs_at_most_the_flush_timeout(fast_cfg, no_leaks, caplog):
    silent = Silent()
    cfg = fast_cfg("run.name=silent", "train.epochs=1", f"tracking.mlflow.uri=http://127.0.0.1:{silent.port}",
                   "tracking.flush_timeout_s=3")
    try:
        with caplog.at_level(logging.INFO, logger="raytf"):
            result = raytf.fit(cfg, quiet=True)
        returned = time.time()
    finally:
        silent.sock.close()
    assert result.status == "succeeded", result.error
    assert result.mlflow_run_id is None
    # result.json was written with the run's end, before the flush: the flush itself took the timeout, no more
    # (the figures drawn for it, a second on this machine, aside).
    assert returned - result.summary["ended_at"] < 3 + 5
    down = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
    assert len(down) == 1, down
    assert any("within tracking.flush_timeout_s (3s)" in r.getMessage() for r in caplog.records)


@pytest.mark.slow  # ~20 s: a one-task script run
def test_no_secret_reaches_the_tracking_store(script_cfg, tmp_path, no_leaks):
    planted = ("planted-token-5f1e", "planted-api-key-9c2d")
    db = tmp_path / "tracking" / "mlflow.db"
    cfg = script_cfg("run.name=secrets", "cluster.strategy=mirrored", "cluster.num_workers=1",
                     "train.script=tests/scripts/secret_probe.py", f"train.args=[--api-key,{planted[1]}]",
                     f"ray.runtime_env.env_vars.MY_SERVICE_TOKEN={planted[0]}", f"tracking.mlflow.uri=sqlite:///{db}")
    result = raytf.fit(cfg, quiet=True)
    assert result.status == "succeeded", result.error
    run = _client(cfg.tracking.mlflow.uri).get_run(result.mlflow_run_id)
    assert run.data.params["ray.runtime_env.env_vars.MY_SERVICE_TOKEN"] == "***"
    assert run.data.params["train.args"] == '["--api-key", "***"]'
    # The whole store: the database and every artefact (beside it: mlartifacts/).
    store = [p for p in (tmp_path / "tracking").rglob("*") if p.is_file()]
    assert db in store and any(p.name == "config.yaml" for p in store) and any(p.name == "result.json" for p in store)
    for path in store:
        data = path.read_bytes()
        for secret in planted:
            assert secret.encode() not in data, f"{secret} in {path}"


@pytest.mark.slow  # ~60 s: two launches, one with a retry; the main path runs by default (keras_run)
def test_a_retry_and_a_relaunch_continue_one_mlflow_run(fast_cfg, mlflow_server, no_leaks):
    # (3 epochs: the kill lands before the last one ends, else the failure would not be retried.)
    cfg = fast_cfg("run.name=tracked", "train.epochs=3", f"tracking.mlflow.uri={mlflow_server.uri}",
                   "tracking.mlflow.experiment=lineage", "tracking.mlflow.tags.team=vision")
    on_event, killed = _kill_rank1_after_first_commit("tracked")
    first = raytf.fit(cfg, quiet=True, on_event=on_event)
    assert first.status == "succeeded", first.error
    assert killed and [a["status"] for a in first.attempts] == ["failed", "succeeded"]
    again = raytf.fit(raytf.load_config(cfg, ["train.epochs=4"]), quiet=True)
    assert again.status == "succeeded", again.error
    assert again.mlflow_run_id == first.mlflow_run_id

    client = _client(mlflow_server.uri)
    experiment = client.get_experiment_by_name("lineage")
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs] == [first.mlflow_run_id]  # one MLflow run for the raytf run
    run = runs[0]
    assert run.info.status == "FINISHED" and run.data.tags["team"] == "vision"
    tags = run.data.tags
    assert (tags["raytf.attempt.1.status"], tags["raytf.attempt.1.cause"], tags["raytf.attempt.1.decision"]) == (
        "failed", "system", "retry")
    assert tags["raytf.attempt.2.status"] == tags["raytf.attempt.3.status"] == "succeeded"
    # Params keep the first launch's values (MLflow never changes one); the relaunch's change is a tag.
    assert run.data.params["train.epochs"] == "3" and tags["raytf.changed_params"] == "train.epochs: 3 -> 4"
    # One lineage: the epochs of both launches on one curve (an epoch trained again after the retry, again).
    steps = [s for s, _ in _history(client, run.info.run_id, "loss")]
    assert set(steps) == {1, 2, 3, 4} and steps.count(4) == 1
    # (No "model": fast_cfg exports none; the exported model as an artefact: the first test here.)
    assert {"learning_curves.png", "ranks.png", "result.json", "config.yaml"} <= _artifacts(client, run.info.run_id)


@pytest.mark.slow  # ~45 s: two trials
def test_a_sweeps_trials_are_child_runs(fast_cfg, mlflow_server, no_leaks):
    """Its grid is of worker counts: the trials are of two sizes, each a run of its own size (the only sweep of the
    suite that varies a trial's tasks; the CLI's sweep section runs as docs/notebooks.md writes it)."""
    cfg = fast_cfg("train.epochs=1", "train.steps_per_epoch=4", "train.batch_size=8",
                   f"tracking.mlflow.uri={mlflow_server.uri}", "tracking.mlflow.experiment=sweeps")
    table = raytf.sweep(cfg, space={"cluster.num_workers": [1, 2]}, max_concurrent=1, name="swp")
    assert (table["status"] == "succeeded").all(), table[["status", "error"]]
    client = _client(mlflow_server.uri)
    experiment = client.get_experiment_by_name("sweeps")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert parent.info.run_name == "swp" and parent.info.status == "FINISHED"
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent.info.run_id}
    assert sorted(c.data.params["cluster.num_workers"] for c in children) == ["1", "2"]
    assert sorted(len(raytf.load_result(d).tasks) for d in table["run_dir"]) == [1, 2]
    assert all(c.info.status == "FINISHED" and _history(client, c.info.run_id, "loss") for c in children)
    assert {raytf.load_result(d).mlflow_run_id for d in table["run_dir"]} == {c.info.run_id for c in children}
    assert "trials.csv" in _artifacts(client, parent.info.run_id)


@pytest.mark.slow  # ~30 s
def test_a_tracker_down_at_start_gets_the_metrics_when_it_is_back(fast_cfg, mlflow_server, no_leaks, caplog):
    proxy = LateProxy(mlflow_server.port)
    uri = f"http://127.0.0.1:{proxy.port}"
    cfg = fast_cfg("run.name=late", f"tracking.mlflow.uri={uri}", "tracking.mlflow.experiment=late",
                   "tracking.flush_timeout_s=120")

    def on_event(e: ev.Event) -> None:
        if e.kind == ev.EPOCH and e.payload["epoch"] == 1:  # the tracker comes back while the run trains
            proxy.open()

    try:
        with caplog.at_level(logging.INFO, logger="raytf"):
            result = raytf.fit(cfg, quiet=True, on_event=on_event)
    finally:
        proxy.close()
    assert result.status == "succeeded", result.error
    down = [r for r in caplog.records if "does not answer" in r.getMessage()]
    assert len(down) == 1 and down[0].levelno == logging.WARNING  # one warning, however many tries
    assert any("answers again" in r.getMessage() for r in caplog.records)
    run_id = result.mlflow_run_id
    assert run_id and raytf.load_result(result.run_dir).mlflow_run_id == run_id  # (result.json written again)
    client = _client(mlflow_server.uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["raytf.status"] == "succeeded"
    assert [s for s, _ in _history(client, run_id, "loss")] == [1, 2]  # held while it was down, then sent


class Silent:
    """A port that takes connections and never answers (a tracker that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
