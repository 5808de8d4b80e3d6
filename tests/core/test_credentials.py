"""Credentials (raytf issue 19): refused where they would travel or be written (storage.path userinfo, storage keys
in a run's config), read from storage.credentials_file on each node, never pickled into task arguments, and masked
in what is written (config.yaml, result.json). Pure: no Ray (the CLI runs with a `ray` that cannot be imported)."""

import dataclasses
import json
import pickle

import pytest

from raytf import _storage as storage
from raytf._s3 import read_credentials
from raytf.config import (
    SECRET,
    StorageConfig,
    load_config,
    redacted,
    secret_runtime_env,
    task_view,
    to_dict,
    to_yaml,
    validate_run,
)
from raytf.config.redact import redact_args, redact_storage_path, redact_text, secret_name
from raytf.errors import ConfigError
from tests.conftest import ROOT

PLANTED = "pl4nted-S3cr3t-7c1e"
BASE = {"train": {"entrypoint": "examples.keras_cnn:train"}}


def _refused(source, overrides=None) -> str:
    with pytest.raises(ConfigError) as info:
        validate_run(load_config(source, overrides))
    message = str(info.value)
    assert "\n" not in message and PLANTED not in message, message
    return message


# 1. Userinfo in storage.path, any scheme, refused without echoing it.

@pytest.mark.parametrize("path", [f"s3://AKIAEXAMPLE:{PLANTED}@bucket/runs", f"s3://{PLANTED}@bucket/runs",
                                  f"gs://user:{PLANTED}@bucket/runs", f"hdfs://{PLANTED}@namenode:8020/runs",
                                  f"s3://AKIAEXAMPLE:{PLANTED}/x@bucket/runs",  # a raw '/' in the secret
                                  f"s3://bucket/runs?endpoint_override=h:1&secret_key={PLANTED}",
                                  f"s3://bucket/runs?session_token={PLANTED}"])
def test_credentials_in_storage_path_are_refused_without_the_value(path):
    message = _refused(BASE, [f"storage.path={path}"])
    assert message.startswith(("storage.path contains credentials (user:password@...",
                               "storage.path's query holds credentials")), message
    assert "storage.credentials_file" in message  # the fix


@pytest.mark.parametrize("path", ["./runs@v2", "s3://bucket/runs@v2", "hdfs://namenode:8020/runs@v2",
                                  "s3://bucket/runs?endpoint_override=127.0.0.1:9000&scheme=http", "file:///tmp/r"])
def test_paths_without_credentials_are_fine(path):
    assert load_config(BASE, [f"storage.path={path}"]).storage.path == path


# 2. Storage keys: a run refuses them (they would travel to every task); reading runs in-process may use them.

def test_a_run_refuses_storage_keys_in_its_config():
    message = _refused(BASE, ["storage.path=s3://bucket/runs", "storage.access_key=AKIAEXAMPLE",
                              f"storage.secret_key={PLANTED}"])
    assert message.startswith("storage.access_key/storage.secret_key are set (values not shown)")
    assert "storage.credentials_file" in message and "AWS_ACCESS_KEY_ID" in message
    cfg = load_config(BASE, ["storage.access_key=AKIAEXAMPLE", f"storage.secret_key={PLANTED}"])  # to read runs
    assert PLANTED not in repr(cfg.storage)


@pytest.fixture
def refused(cli):
    """The launch's one line refusing `overrides` of conf/local.yaml (exit 2), in this process: `cli` fails a case
    that reached Ray (tests/core/conftest.py)."""
    def run(*overrides: str) -> str:
        code, out, err = cli("raytf.launch", ROOT / "conf/local.yaml", *overrides)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert PLANTED not in out + err
        assert lines[0].startswith("raytf: config error: ")
        return lines[0]

    return run


def test_cli_refuses_credentials_before_ray_with_exit_2(refused, tmp_path):
    assert "storage.path contains credentials" in refused(f"storage.path=s3://AKIAEXAMPLE:{PLANTED}@b/runs")
    assert "storage.access_key/storage.secret_key are set" in refused(
        "storage.path=s3://b/runs", "storage.access_key=AKIAEXAMPLE", f"storage.secret_key={PLANTED}")
    bad = tmp_path / "credentials"
    bad.write_text(f"aws_secret_access_key = {PLANTED}\n")  # no [default] header: configparser quotes the line
    line = refused("storage.path=s3://b/runs", f"storage.credentials_file={bad}")
    assert f"storage.credentials_file ({str(bad)!r})" in line and "is not an INI file" in line
    assert "no such file" in refused("storage.path=s3://b/runs", f"storage.credentials_file={tmp_path}/nope")


# 3. storage.credentials_file: read where the storage is opened, its problems named without its contents.

def _credentials(tmp_path, text: str) -> str:
    path = tmp_path / "aws-credentials"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("text", "why"), [
    (f"aws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = {PLANTED}\n", "is not an INI file "
                                                                              "(MissingSectionHeaderError at line 1)"),
    (f"[default]\naws_access_key_id = AKIAEXAMPLE\n{PLANTED}\n", "is not an INI file (ParsingError at line 3)"),
    (f"[prod]\naws_secret_access_key = {PLANTED}\n", "has no [default] section (sections: prod)"),
    (f"[default]\naws_access_key_id = AKIAEXAMPLE\nsecret = {PLANTED}\n", "[default] has no aws_secret_access_key"),
    (b"[default]\n\xff\xfe", "is not UTF-8 text"),
])
def test_a_bad_credentials_file_is_named_never_shown(tmp_path, text, why):
    path = tmp_path / "aws-credentials"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as info:
        read_credentials(str(path))
    message = str(info.value)
    assert message.startswith(f"storage.credentials_file ({str(path)!r}) on node ") and why in message, message
    assert PLANTED not in message and "AKIAEXAMPLE" not in message and "\n" not in message
    e = info.value
    assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__)  # no chained quote


def test_the_credentials_file_is_what_s3_is_opened_with_and_no_pickle_carries_keys(tmp_path):
    path = _credentials(tmp_path, f"[default]\naws_access_key_id = AKIAFROMFILE\naws_secret_access_key = {PLANTED}\n"
                                  "aws_session_token = tok3n\n")
    o = StorageConfig(path="s3://bucket/runs?endpoint_override=127.0.0.1:1&scheme=http", credentials_file=path)
    rd = storage.RunDir(o, "exp1")
    opened = rd.fs.__reduce__()[1][0]  # pyarrow's S3FileSystem pickles its keys: RunDir never pickles it
    assert (opened["access_key"], opened["secret_key"], opened["session_token"]) == ("AKIAFROMFILE", PLANTED, "tok3n")
    assert (opened["endpoint_override"], opened["scheme"]) == ("127.0.0.1:1", "http")  # from the path's query
    assert PLANTED.encode() not in pickle.dumps(rd)
    again = pickle.loads(pickle.dumps(rd))  # the other side reads the file itself
    assert again.fs.__reduce__()[1][0]["secret_key"] == PLANTED and again.uri == "s3://bucket/runs/exp1"
    with_keys = storage.RunDir(StorageConfig(path="s3://bucket/runs", access_key="AKIAREADER", secret_key=PLANTED),
                               "exp1")  # a reader's own keys, in this process
    assert with_keys.fs.__reduce__()[1][0]["secret_key"] == PLANTED
    data = pickle.dumps(with_keys)
    assert PLANTED.encode() not in data and b"AKIAREADER" not in data


def test_a_readers_uri_with_userinfo_is_not_shown(tmp_path):
    rd = storage.RunDir(f"s3://AKIAEXAMPLE:{PLANTED}@bucket/runs?endpoint_override=127.0.0.1:1&scheme=http", "x")
    assert rd.uri == "s3://bucket/runs/x"
    with pytest.raises(storage.StorageError) as info:
        storage.resolve(f"s3://AKIAEXAMPLE:{PLANTED}/x@bucket/runs?region=eu-west-1")  # pyarrow quotes the URI
    assert PLANTED not in str(info.value)


# 4. What is written: names, URLs, flags.

@pytest.mark.parametrize("name", ["DATABASE_URL", "GITHUB_PAT", "AZURE_STORAGE_CONNECTION_STRING", "SENTRY_DSN",
                                  "MY_API_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "DB_PWD", "apiKey",
                                  "hf-token", "X-Amz-Signature", "sig", "BASIC_AUTH", "GOOGLE_APPLICATION_CREDENTIALS",
                                  "REPLICA_DB_URI"])
def test_secret_names(name):
    assert secret_name(name)


@pytest.mark.parametrize("name", ["PYTHONPATH", "PATH", "PWD", "OMP_NUM_THREADS", "TF_USE_LEGACY_KERAS",
                                  "CUDA_VISIBLE_DEVICES", "AUTHOR", "SPATIAL_DIMS", "REDIS_URL", "learning_rate"])
def test_names_that_are_not_secret(name):
    assert not secret_name(name)


def test_urls_lose_their_userinfo_and_query():
    assert redact_text("https://user:tok@host/x?sig=abc#frag") == "https://***@host/x?***#frag"
    assert (redact_text("git+https://ghp_tok@github.com/o/r.git@v1.0#egg=r")
            == "git+https://***@github.com/o/r.git@v1.0#egg=r")
    assert redact_text("https://host:8443/o/r.git@v1") == "https://host:8443/o/r.git@v1"  # a port, a git ref
    assert redact_text("s3://KEY:abc/def@bucket/x") == "s3://***@bucket/x"  # a raw '/' in the secret
    assert redact_text("postgres://u:p@ss@db:5432/x") == "postgres://***@db:5432/x"
    assert redact_text("--data /tmp/a@b ./x?y") == "--data /tmp/a@b ./x?y"  # no URL: untouched
    assert (redact_storage_path("s3://b/r?endpoint_override=h:1&secret_key=zz")
            == "s3://b/r?endpoint_override=h:1&secret_key=***")


def test_train_args_flag_values():
    args = ["--api-key", PLANTED, "--api_key=" + PLANTED, "--hf-token", "-" + PLANTED, "--epochs", "3",
            f"db.password={PLANTED}", "--data", f"https://u:{PLANTED}@h/d?sig={PLANTED}", "--password", "--verbose",
            "{checkpoint_dir}"]
    assert redact_args(args) == ["--api-key", SECRET, "--api_key=***", "--hf-token", SECRET, "--epochs", "3",
                                 "db.password=***", "--data", "https://***@h/d?***", "--password", "--verbose",
                                 "{checkpoint_dir}"]


def _everything(**storage_keys):
    return load_config({
        "train": {"script": "train.py", "args": ["--api-key", PLANTED, "--epochs", "2"],
                  "params": {"hf_token": PLANTED, "key_dim": 64, "url": f"https://x:{PLANTED}@h"}},
        "ray": {"address": f"ray://admin:{PLANTED}@head:10001", "runtime_env": {
            "env_vars": {"DATABASE_URL": f"postgres://u:{PLANTED}@h/db", "GITHUB_PAT": PLANTED,
                         "OPAQUE": f"redis://:{PLANTED}@cache:6379", "N": 4},
            "pip": [f"git+https://{PLANTED}@github.com/o/r.git", "numpy"],
            "working_dir": f"https://bucket.example/code.zip?X-Amz-Signature={PLANTED}",
            "py_modules": [f"s3://u:{PLANTED}@b/m.zip"]}},
        "storage": {"path": "s3://bucket/runs?endpoint_override=127.0.0.1:9000&scheme=http", **storage_keys},
    })


def test_redacted_views_hold_no_secret():
    cfg = _everything(access_key="AKIAEXAMPLE", secret_key=PLANTED)
    view = redacted(cfg)
    for text in (to_yaml(view), json.dumps(to_dict(view))):
        assert PLANTED not in text
    assert view.train.args == ["--api-key", SECRET, "--epochs", "2"]
    assert view.train.params == {"hf_token": SECRET, "key_dim": 64, "url": "https://***@h"}
    env = view.ray.runtime_env["env_vars"]
    assert env == {"DATABASE_URL": SECRET, "GITHUB_PAT": SECRET, "OPAQUE": "redis://***@cache:6379", "N": 4}
    assert view.ray.runtime_env["pip"] == ["git+https://***@github.com/o/r.git", "numpy"]
    assert view.storage.path == cfg.storage.path  # its query holds settings, not secrets (those are refused)
    assert (view.storage.access_key, view.storage.secret_key) == (SECRET, SECRET)
    assert view.cluster.strategy is cfg.cluster.strategy  # enums stay enums
    assert cfg.train.args[1] == PLANTED and cfg.ray.runtime_env["env_vars"]["GITHUB_PAT"] == PLANTED  # intact


def test_the_warning_names_secret_runtime_env_entries_only():
    cfg = _everything()
    named = secret_runtime_env(cfg.ray.runtime_env)
    assert named == ["env_vars.DATABASE_URL", "env_vars.GITHUB_PAT", "env_vars.OPAQUE", "pip[0]", "working_dir",
                     "py_modules[0]"]
    assert secret_runtime_env({"env_vars": {"OMP_NUM_THREADS": "2"}, "pip": ["numpy"]}) == []


def test_the_tasks_view_carries_no_runtime_env_nor_keys():
    cfg = _everything(access_key="AKIAEXAMPLE", secret_key="other-secret")
    view = task_view(cfg)
    assert view.ray.runtime_env == {} and view.ray.address is None
    assert (view.storage.access_key, view.storage.secret_key) == (None, None)
    data = pickle.dumps(view)
    assert b"other-secret" not in data
    assert PLANTED.encode() in data  # train.args and train.params: the program's own inputs reach it
    inputs_aside = dataclasses.replace(view, train=dataclasses.replace(view.train, args=[], params={}))
    assert PLANTED.encode() not in pickle.dumps(inputs_aside)
    assert cfg.ray.runtime_env and cfg.storage.secret_key == "other-secret"  # the driver's copy is intact
