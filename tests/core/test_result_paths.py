"""Result.load_model and load_result find the run from its own directory, not from the working directory nor
the recorded (possibly relative) storage.path, and read it with the reader's storage options, never the recorded
ones. Pure: a fake run directory, and a stand-in for tf_keras."""

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
    rd = _run_dir_of(result.run_dir, result.storage)
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


def test_run_dir_takes_the_readers_s3_options(tmp_path):
    (tmp_path / "credentials").write_text("[default]\naws_access_key_id = AKIAREADER\naws_secret_access_key = s\n")
    reader = StorageConfig(path="s3://elsewhere", endpoint_override="127.0.0.1:1", scheme="http",
                           region="eu-west-1", credentials_file=str(tmp_path / "credentials"))
    rd = _run_dir_of("s3://bucket/runs/exp1", reader)
    assert rd.uri == "s3://bucket/runs/exp1" and rd.run_name == "exp1"
    o = rd.options
    assert (o.endpoint_override, o.scheme, o.region) == ("127.0.0.1:1", "http", "eu-west-1")
    assert o.credentials_file == str(tmp_path / "credentials") and o.path == "s3://bucket/runs"
    assert rd.fs.__reduce__()[1][0]["access_key"] == "AKIAREADER"


def test_load_model_never_reads_with_the_storage_settings_recorded_in_config_yaml(monkeypatch, fake_tf_keras):
    """A planted config.yaml names an attacker's endpoint: load_model opens the run with what the reader gave
    load_result (or the defaults), so the reader's credentials never go there (raytf issue 19)."""
    planted = load_config({"train": {"entrypoint": "examples.keras_cnn:train"}},
                          ["storage.path=s3://bucket/runs", "storage.endpoint_override=attacker.invalid:443"])
    opened = []

    def download_dir(self, rel, local):
        opened.append((self.uri, self.options.endpoint_override, self.fs.__reduce__()[1][0]["endpoint_override"]))
        return local

    monkeypatch.setattr(storage.RunDir, "download_dir", download_dir)
    reader = StorageConfig(path="s3://bucket/runs?endpoint_override=127.0.0.1:1&scheme=http")
    for given, endpoint in ((reader, "127.0.0.1:1"), (None, "")):
        result = Result(status="succeeded", run_dir="s3://bucket/runs/exp1", config=planted,
                        summary={"model": "s3://bucket/runs/exp1/model"}, metrics_table=pa.table({}), storage=given)
        result.load_model()
        uri, _, used = opened[-1]
        assert uri == "s3://bucket/runs/exp1" and used == endpoint
    assert all("attacker" not in str(o) for o in opened)


def test_load_result_reads_with_the_readers_storage_options(tmp_path):
    run = _fake_run(tmp_path)
    reader = StorageConfig(path="ignored", upload_retries=0)
    result = load_result(run, reader)
    assert result.storage.path == os.path.dirname(run) and result.storage.upload_retries == 0
    assert load_result(run).storage.upload_retries == StorageConfig().upload_retries


def test_run_dir_keeps_s3_options_given_in_the_readers_paths_query():
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


def test_an_older_run_with_credentials_in_its_recorded_storage_path_is_still_read(tmp_path):
    """Recorded before they were refused: read, with the recorded path (shown only) cleaned of them."""
    run = _fake_run(tmp_path)
    config = tmp_path / "runs/exp1" / storage.CONFIG_FILE
    text = config.read_text()
    assert "path: ./runs" in text
    config.write_text(text.replace("path: ./runs", "path: s3://AKIAOLD:old-s3cret@bucket/runs?region=x", 1))
    result = load_result(run)
    assert result.config.storage.path == "s3://bucket/runs" and "old-s3cret" not in repr(result.config)
