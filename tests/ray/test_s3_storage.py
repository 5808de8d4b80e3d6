"""Runs whose storage is S3: a real S3 endpoint (moto's server) on 127.0.0.1, started by the fixture."""

import dataclasses
import hashlib
import logging
import pickle
import re
import threading
import time

import pyarrow.fs as pafs
import pytest

import raytf
from raytf._core import events as ev
from raytf._core.tasks import TaskRun
from raytf._storage import RunDir
from tests.conftest import ROOT, S3_TEST_ENV, environ

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

KEY_ID, SECRET = S3_TEST_ENV["AWS_ACCESS_KEY_ID"], S3_TEST_ENV["AWS_SECRET_ACCESS_KEY"]


class Endpoint:
    """moto's S3 server on a fixed port, so it can be stopped and started again (its state stays in memory)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._cls = ThreadedMotoServer
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
        self.server.start()
        self.port = self.server._server.server_port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        self.server = self._cls(ip_address="127.0.0.1", port=self.port)
        self.server.start()


@pytest.fixture(scope="module")
def s3():
    """The endpoint, and the credentials in this (the driver's) environment; the session's Ray started its
    processes with them (tests/conftest.py: SessionRay), so the tasks have them too, as on a real cluster."""
    with environ(S3_TEST_ENV):
        endpoint = Endpoint()
        yield endpoint
        endpoint.stop()


def s3fs(endpoint: Endpoint) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(endpoint_override=endpoint.address, scheme="http", region="us-east-1",
                             allow_bucket_creation=True)


def cfg_for(endpoint, bucket, *overrides):
    return raytf.load_config(ROOT / "conf/local.yaml", [
        f"storage.path=s3://{bucket}/runs", f"storage.endpoint_override={endpoint.address}", "storage.scheme=http",
        "storage.region=us-east-1", "train.epochs=2", "train.steps_per_epoch=8", "train.batch_size=16",
        "metrics.every_steps=2", "metrics.flush_interval_s=0", "train.params.validation_steps=0",
        "cluster.standby=0", *overrides])  # (standbys: tests/ray/test_standby.py; here their imports only slow CI)


def all_objects(fs, prefix):
    return [i for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=True)) if i.type == pafs.FileType.File]


@pytest.mark.slow  # step 2 (two runs on moto); a run on S3 with its one secret in step 1 (below)
def test_run_and_resume_on_s3_without_leaking_credentials(s3, no_leaks, monkeypatch):
    # Every metrics part leaves the driver's memory once written: the tables below are read back from S3.
    monkeypatch.setattr("raytf._core.metrics.MEMORY_BYTES", 0)
    fs = s3fs(s3)
    fs.create_dir("runs-bucket")
    cfg = cfg_for(s3, "runs-bucket", "run.name=s3run",
                  "ray.runtime_env.env_vars.MY_API_TOKEN=token-value-should-not-leak")
    result = raytf.fit(cfg, quiet=True)
    assert result.status == "succeeded", result.error
    assert result.run_dir == "s3://runs-bucket/runs/s3run"
    names = {i.path.removeprefix("runs-bucket/runs/s3run/") for i in all_objects(fs, "runs-bucket/runs/s3run")}
    assert {"config.yaml", "result.json", "metrics.parquet"} <= names
    last = "checkpoints/ckpt-n00000002-e000002-s0000000016"
    assert f"{last}/_COMMITTED.json" in names and f"{last}/ckpt.index" in names

    again = raytf.fit(raytf.load_config(cfg, ["train.epochs=3"]), quiet=True)
    assert again.status == "succeeded", again.error
    assert again.summary["resumed_from"] == f"s3://runs-bucket/runs/s3run/{last}"
    df = again.metrics
    assert set(df[df["attempt"] == 2]["epoch"]) == {3}
    first = result.metrics
    assert len(first) and df[df["attempt"] == 1].reset_index(drop=True).equals(first)  # read back, none doubled

    for info in all_objects(fs, "runs-bucket"):
        with fs.open_input_stream(info.path) as f:
            data = f.read()
        for secret in (SECRET.encode(), KEY_ID.encode(), b"token-value-should-not-leak"):
            assert secret not in data, f"{secret!r} leaked into {info.path}"
    loaded = raytf.load_result(f"s3://runs-bucket/runs/s3run?endpoint_override={s3.address}&scheme=http")
    assert loaded.status == "succeeded" and loaded.metrics_table.num_rows == len(df)


# One secret planted through every route a credential can take into a run (raytf issue 19).
PLANTED = "pl4nted-S3cr3t-5a7d"
FILE_KEY_ID = "AKIAFROMTHEFILE"


class _AccessKeys:
    """Wraps moto's WSGI app: the access key id of every request it receives (SigV4's `Credential=`)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.server, self.seen = endpoint.server._server, []
        self.app = self.server.app
        self.server.app = self

    def __call__(self, environ, start_response):
        m = re.search(r"Credential=([^/]+)/", environ.get("HTTP_AUTHORIZATION", ""))
        self.seen.append(m.group(1) if m else None)
        return self.app(environ, start_response)

    def close(self) -> None:
        self.server.app = self.app


def test_one_secret_through_every_route(s3, no_leaks, tmp_path, monkeypatch, capfd, caplog):
    """storage.path userinfo and storage keys are refused without the secret; the run reads its S3 credentials
    from storage.credentials_file on every node (moto sees only the file's key id); train.args reach the script
    but no file or log; a secret runtime_env variable is warned about by name; and none of it is in the run
    directory, the driver's output, or what the driver pickles to its actors (train.args aside)."""
    import ray
    from ray._private import serialization

    from raytf.config import StorageConfig

    fs = s3fs(s3)
    fs.create_dir("secret-bucket")
    monkeypatch.setenv("RAYTF_TEST_DRIVER_SECRET", PLANTED)  # the driver's environment
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(f"[default]\naws_access_key_id = {FILE_KEY_ID}\naws_secret_access_key = {PLANTED}\n")
    s3_options = {"storage.path": "s3://secret-bucket/runs", "storage.endpoint_override": s3.address,
                  "storage.scheme": "http", "storage.region": "us-east-1"}
    with pytest.raises(raytf.ConfigError) as refused:
        raytf.load_config(ROOT / "conf/script.yaml", {**s3_options,
                                                       "storage.path": f"s3://{KEY_ID}:{PLANTED}@secret-bucket/runs"})
    assert "storage.path contains credentials" in str(refused.value) and PLANTED not in str(refused.value)
    with pytest.raises(raytf.ConfigError) as refused:
        raytf.fit(raytf.load_config(ROOT / "conf/script.yaml", {**s3_options, "run.name": "keys",
                                                                 "storage.access_key": KEY_ID,
                                                                 "storage.secret_key": PLANTED}), quiet=True)
    assert "storage.access_key/storage.secret_key are set" in str(refused.value)
    assert PLANTED not in str(refused.value)
    assert all_objects(fs, "secret-bucket") == []  # refused before anything was written

    cfg = raytf.load_config(ROOT / "conf/script.yaml", {
        **s3_options, "storage.credentials_file": str(credentials), "run.name": "planted",
        "cluster.strategy": "mirrored", "cluster.num_workers": 1, "train.script": "tests/scripts/secret_probe.py",
        "train.args": ["--api-key", PLANTED],
        "ray.runtime_env.env_vars.DATABASE_URL": f"postgres://u:{PLANTED}@db.internal/app"})
    sent: list = []  # (value, its bytes) for every argument the driver serializes for Ray
    real = serialization.SerializationContext.serialize

    def spy(self, value):
        out = real(self, value)
        sent.append((value, out.to_bytes() if hasattr(out, "to_bytes") else b""))
        return out

    monkeypatch.setattr(serialization.SerializationContext, "serialize", spy)
    keys = _AccessKeys(s3)
    try:
        with caplog.at_level(logging.INFO, logger="raytf"):
            result = raytf.fit(cfg, quiet=True)
    finally:
        keys.close()
        monkeypatch.undo()
    assert result.status == "succeeded", result.error
    assert set(keys.seen) == {FILE_KEY_ID}  # driver and task: the file's keys, not the environment's
    warnings = [r.getMessage() for r in caplog.records if "runtime_env" in r.getMessage()]
    assert len(warnings) == 1 and "env_vars.DATABASE_URL look like secrets" in warnings[0], warnings

    files = {i.path.removeprefix("secret-bucket/runs/planted/"): i for i in all_objects(fs, "secret-bucket")}
    assert {"config.yaml", "result.json", "logs/worker0-attempt1.log", "workdir/worker0/api_key.sha256"} <= set(files)
    assert any(name.startswith("checkpoints/") for name in files)
    for info in files.values():
        with fs.open_input_stream(info.path) as f:
            assert PLANTED.encode() not in f.read(), f"the secret leaked into {info.path}"
    with fs.open_input_stream("secret-bucket/runs/planted/workdir/worker0/api_key.sha256") as f:
        assert f.read().decode() == hashlib.sha256(PLANTED.encode()).hexdigest()  # the script got the real value
    with fs.open_input_stream("secret-bucket/runs/planted/logs/worker0-attempt1.log") as f:
        assert "api key received; DATABASE_URL set: True" in f.read().decode()
    with fs.open_input_stream("secret-bucket/runs/planted/config.yaml") as f:
        text = f.read().decode()
    assert re.search(r"- --api-key\n *- '\*\*\*'\n", text) and "DATABASE_URL: '***'" in text
    out, err = capfd.readouterr()
    assert PLANTED not in out + err + caplog.text + repr(result)

    sent = [part for value, data in sent for part in _parts(value, data)]
    configs = [v for v, _ in sent if isinstance(v, raytf.Config)]
    assert configs and all(c.train.args == ["--api-key", PLANTED] and c.ray.runtime_env == {} for c in configs)
    for value, data in sent:
        if isinstance(value, raytf.Config):  # the script's own argument reaches it; nothing else of the secret
            assert PLANTED.encode() in data
            value = dataclasses.replace(value, train=dataclasses.replace(value.train, args=[]))
            data = pickle.dumps(value)
        assert PLANTED.encode() not in data, f"the secret was sent to an actor in a {type(value).__name__}"
    run_dirs = [v for v, _ in sent if isinstance(v, RunDir)]
    assert run_dirs and all(rd.options.credentials_file == str(credentials) for rd in run_dirs)

    loaded = raytf.load_result("s3://secret-bucket/runs/planted", StorageConfig(
        endpoint_override=s3.address, scheme="http", region="us-east-1", credentials_file=str(credentials)))
    assert loaded.status == "succeeded" and loaded.config.train.args == ["--api-key", "***"]
    assert ray.is_initialized()


def _parts(value, data: bytes):
    """A task's call gets one TaskRun: its config, its run directory and the rest are looked at one by one."""
    if not isinstance(value, TaskRun):
        yield value, data
        return
    rest = dataclasses.replace(value, cfg=None, run_dir=None, bus=None)
    for part in (value.cfg, value.run_dir, rest):
        yield part, pickle.dumps(part)


@pytest.mark.slow  # step 2: a fault scenario (~30 s)
def test_endpoint_outage_mid_run(s3, no_leaks):
    """The endpoint stops during training and comes back 4 s later: training goes on meanwhile, the
    checkpoint lands after retries, and no partial checkpoint is ever visible."""
    fs = s3fs(s3)
    fs.create_dir("outage")
    outage: dict[str, float] = {}
    steps_during: list[int] = []

    def chaos(e: ev.Event) -> None:
        if e.kind == ev.STEP and e.rank == 0 and e.payload["step"] >= 4 and "stop" not in outage:
            s3.stop()
            outage["stop"] = time.time()
            threading.Timer(4.0, lambda: (s3.start(), outage.setdefault("start", time.time()))).start()
        elif e.kind == ev.STEP and "stop" in outage and "start" not in outage:
            steps_during.append(e.payload["step"])

    cfg = cfg_for(s3, "outage", "run.name=outage", "train.epochs=3", "train.steps_per_epoch=30",
                  "storage.upload_retries=6", "storage.upload_backoff_s=0.5", "storage.max_inflight_uploads=2")
    result = raytf.fit(cfg, quiet=True, on_event=chaos)
    assert result.status == "succeeded", result.error
    assert "start" in outage
    assert len(steps_during) >= 2  # training did not wait for the storage
    entries = RunDir(cfg.storage, "outage").checkpoints.list()
    assert entries and all(e.committed for e in entries)  # nothing partial visible
    assert entries[-1].name.endswith("-e000003-s0000000090")


def test_replacing_a_committed_checkpoint_on_s3(s3, tmp_path):
    """The same checkpoint name uploaded again: the new copy is committed beside the old one, then takes its
    place (on S3 a directory cannot be renamed: its files are copied over, the marker last)."""
    fs = s3fs(s3)
    fs.create_dir("replace-bucket")
    rd = RunDir(cfg_for(s3, "replace-bucket").storage, "r")
    rd.makedirs()
    for i, content in enumerate((b"old" * 100, b"new" * 100)):
        local = tmp_path / f"ckpt{i}"
        local.mkdir()
        (local / "ckpt.index").write_bytes(b"index")
        (local / "ckpt.data-00000-of-00001").write_bytes(content)
        rd.checkpoints.upload(str(local), 1, 10, {"attempt": i + 1})
    (latest,) = rd.checkpoints.list()
    assert latest.dir == latest.name == "ckpt-e000001-s0000000010"
    prefix = rd.checkpoints.download(latest, str(tmp_path / "dl"))
    with open(prefix + ".data-00000-of-00001", "rb") as f:
        assert f.read() == b"new" * 100
    names = {i.path.removeprefix("replace-bucket/runs/r/checkpoints/")
             for i in all_objects(fs, "replace-bucket/runs/r/checkpoints")}
    assert names == {"ckpt-e000001-s0000000010/" + n for n in ("ckpt.index", "ckpt.data-00000-of-00001",
                                                                 "_COMMITTED.json")}
