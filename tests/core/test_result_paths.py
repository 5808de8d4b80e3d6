"""Result.load_model and load_result find the run from its own directory, not from the working directory nor
the recorded (possibly relative) storage.path. Pure: a fake run directory, and a stand-in for tf_keras."""

import json
import os
import sys
import types

import pyarrow as pa
import pytest

from raytf import _storage as storage
from raytf.api.result import Result, _run_dir_of, load_result
from raytf.config import StorageConfig, load_config, redacted, to_yaml
from raytf.errors import RaytfError


def _fake_run(root, name="exp1"):
    """<root>/runs/<name>/ as a run launched from <root> with storage.path=./runs leaves it."""
    run = root / "runs" / name
    (run / storage.MODEL_DIR).mkdir(parents=True)
    cfg = load_config({"train": {"entrypoint": "examples.keras_cnn:train"}},
                      ["storage.path=./runs", f"run.name={name}"])
    (run / storage.CONFIG_FILE).write_text(to_yaml(redacted(cfg)))
    summary = {"status": "succeeded", "run": name, "model": f"{run}/{storage.MODEL_DIR}"}
    (run / storage.RESULT_FILE).write_text(json.dumps(summary))
    (run / storage.MODEL_DIR / "saved_model.pb").write_bytes(b"not really a model")
    return os.path.realpath(run)


@pytest.fixture
def fake_tf_keras(monkeypatch):
    """tf_keras.models.load_model stand-in: returns the files of the directory it is given."""
    loaded = []

    def load_model(path):
        loaded.append(sorted(os.listdir(path)))
        return loaded[-1]

    monkeypatch.setitem(sys.modules, "tf_keras", types.SimpleNamespace(models=types.SimpleNamespace(
        load_model=load_model)))
    return loaded


def test_load_model_finds_the_run_from_run_dir_whatever_the_cwd(tmp_path, monkeypatch, fake_tf_keras):
    launched = tmp_path / "launched_here"
    run = _fake_run(launched)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(launched)
    result = load_result("runs/exp1")
    assert result.run_dir == run
    assert result.config.storage.path == "./runs"  # the record keeps what was given: relative
    monkeypatch.chdir(elsewhere)  # ./runs is now another directory, which does not exist
    rd = _run_dir_of(result.run_dir, result.config.storage)
    assert rd.uri == run and rd.exists(storage.MODEL_DIR)
    assert result.load_model() == ["saved_model.pb"]
    assert load_result(run).load_model() == ["saved_model.pb"]
    assert not (elsewhere / "runs").exists()


def test_load_model_without_an_export_says_so_before_importing_tf_keras(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tf_keras", None)  # an import of it would raise ImportError
    cfg = load_config({"train": {"entrypoint": "examples.keras_cnn:train"}})
    result = Result(status="succeeded", run_dir=str(tmp_path / "runs" / "x"), config=cfg, summary={},
                    metrics_table=pa.table({}))
    with pytest.raises(FileNotFoundError, match="has no exported model"):
        result.load_model()


def test_run_dir_keeps_the_recorded_s3_options_and_takes_masked_credentials_from_the_environment():
    recorded = StorageConfig(path="s3://bucket/runs", endpoint_override="127.0.0.1:1", scheme="http",
                             region="eu-west-1", access_key="***", secret_key="***")
    rd = _run_dir_of("s3://bucket/runs/exp1", recorded)
    assert rd.uri == "s3://bucket/runs/exp1" and rd.run_name == "exp1"
    o = rd.options
    assert (o.endpoint_override, o.scheme, o.region) == ("127.0.0.1:1", "http", "eu-west-1")
    assert (o.access_key, o.secret_key) == (None, None)


def test_run_dir_keeps_s3_options_given_in_the_recorded_paths_query():
    query = "endpoint_override=127.0.0.1:1&scheme=http&region=eu-west-1"
    rd = _run_dir_of("s3://bucket/runs/exp1", StorageConfig(path=f"s3://bucket/runs?{query}"))
    assert rd.uri == "s3://bucket/runs/exp1"
    assert rd.options.path == f"s3://bucket/runs?{query}"


def test_a_planted_interpolation_in_config_yaml_is_read_as_text(tmp_path, monkeypatch):
    """A tampered run directory: config.yaml asks for the reader's secret as the S3 endpoint. Reading the run
    (load_result, `raytf.runs show`) must not resolve it."""
    run = _fake_run(tmp_path)
    monkeypatch.setenv("PLANTED_READER_SECRET", "s3cr3t-of-the-reader")
    text = (tmp_path / "runs/exp1" / storage.CONFIG_FILE).read_text()
    planted = text.replace("endpoint_override: null", "endpoint_override: ${oc.env:PLANTED_READER_SECRET}", 1)
    assert planted != text
    (tmp_path / "runs/exp1" / storage.CONFIG_FILE).write_text(planted)
    result = load_result(run)
    assert result.config.storage.endpoint_override == "${oc.env:PLANTED_READER_SECRET}"
    assert "s3cr3t-of-the-reader" not in repr(result.config)
    (tmp_path / "runs/exp1" / storage.CONFIG_FILE).write_text("- not\n- a mapping\n")
    with pytest.raises(RaytfError, match=r"config\.yaml of this run is not a mapping"):
        load_result(run)
