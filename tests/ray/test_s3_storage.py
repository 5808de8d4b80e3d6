"""Runs whose storage is S3: a real S3 endpoint (moto's server) on 127.0.0.1, started by the fixture."""

import os
import threading
import time

import pyarrow.fs as pafs
import pytest

import raytf
from raytf._core import events as ev
from raytf._storage import RunDir
from tests.conftest import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

KEY_ID, SECRET = "AKIARAYTFTESTKEY", "raytf-test-secret-8c41f"


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
    old = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1")
    endpoint = Endpoint()
    yield endpoint
    endpoint.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def ray_local(s3):
    """Overrides conftest's: Ray starts after the credentials are in the environment, so the tasks
    inherit them (credentials from the environment, as on a real cluster)."""
    import ray

    os.chdir(ROOT)
    ray.init(address="local", num_cpus=2, include_dashboard=True, configure_logging=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def s3fs(endpoint: Endpoint) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(endpoint_override=endpoint.address, scheme="http", region="us-east-1",
                             allow_bucket_creation=True)


def cfg_for(endpoint, bucket, *overrides):
    return raytf.load_config(ROOT / "conf/local.yaml", [
        f"storage.path=s3://{bucket}/runs", f"storage.endpoint_override={endpoint.address}", "storage.scheme=http",
        "storage.region=us-east-1", "train.epochs=2", "train.steps_per_epoch=8", "train.batch_size=16",
        "metrics.every_steps=2", "metrics.flush_interval_s=0", *overrides])


def all_objects(fs, prefix):
    return [i for i in fs.get_file_info(pafs.FileSelector(prefix, recursive=True)) if i.type == pafs.FileType.File]


def test_run_and_resume_on_s3_without_leaking_credentials(s3, no_leaks):
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

    for info in all_objects(fs, "runs-bucket"):
        with fs.open_input_stream(info.path) as f:
            data = f.read()
        for secret in (SECRET.encode(), KEY_ID.encode(), b"token-value-should-not-leak"):
            assert secret not in data, f"{secret!r} leaked into {info.path}"
    loaded = raytf.load_result(f"s3://runs-bucket/runs/s3run?endpoint_override={s3.address}&scheme=http")
    assert loaded.status == "succeeded" and loaded.metrics_table.num_rows == len(df)


def test_credentials_in_the_config_are_masked(s3, no_leaks):
    fs = s3fs(s3)
    fs.create_dir("keys-bucket")
    cfg = cfg_for(s3, "keys-bucket", "run.name=keys", f"storage.access_key={KEY_ID}",
                  f"storage.secret_key={SECRET}", "train.epochs=1")
    result = raytf.fit(cfg, quiet=True)
    assert result.status == "succeeded", result.error
    with fs.open_input_stream("keys-bucket/runs/keys/config.yaml") as f:
        text = f.read().decode()
    assert SECRET not in text and "secret_key: '***'" in text
    assert result.summary["config"]["storage"]["secret_key"] == "***"


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
    entries = RunDir(cfg.storage, "outage").list_checkpoints()
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
        rd.upload_checkpoint(str(local), 1, 10, {"attempt": i + 1})
    (latest,) = rd.list_checkpoints()
    assert latest.dir == latest.name == "ckpt-e000001-s0000000010"
    prefix = rd.download_checkpoint(latest, str(tmp_path / "dl"))
    with open(prefix + ".data-00000-of-00001", "rb") as f:
        assert f.read() == b"new" * 100
    names = {i.path.removeprefix("replace-bucket/runs/r/checkpoints/")
             for i in all_objects(fs, "replace-bucket/runs/r/checkpoints")}
    assert names == {"ckpt-e000001-s0000000010/" + n for n in ("ckpt.index", "ckpt.data-00000-of-00001",
                                                                 "_COMMITTED.json")}
