"""Checkpoint naming, commit and pruning rules (pure), and the RunDir that applies them."""

import logging
import os

import pyarrow.fs as pafs
import pytest

from raytf._core import checkpoints as ck
from raytf._storage import CHECKPOINTS_DIR, RunDir


def test_names_round_trip_and_sort():
    names = [ck.checkpoint_name(e, s) for e, s in [(10, 200), (2, 40), (2, 35)]]
    assert [ck.parse_name(n) for n in names] == [(10, 200), (2, 40), (2, 35)]
    assert ck.parse_name("ckpt-e1-s2") is None and ck.parse_name("other") is None
    entries = ck.entries_from_listing([*names, "junk"], committed=names)
    assert [(e.epoch, e.step) for e in entries] == [(2, 35), (2, 40), (10, 200)]
    with pytest.raises(ValueError):
        ck.checkpoint_name(-1, 0)


def test_latest_committed_skips_partial_writes():
    entries = ck.entries_from_listing([ck.checkpoint_name(1, 10), ck.checkpoint_name(2, 20)],
                                      committed=[ck.checkpoint_name(1, 10)])
    assert ck.latest_committed(entries).name == ck.checkpoint_name(1, 10)
    assert ck.latest_committed([]) is None
    assert ck.latest_committed(ck.entries_from_listing([ck.checkpoint_name(1, 1)], [])) is None


def test_prune_keeps_last_k_and_never_the_latest_committed():
    c = [ck.CheckpointEntry(e, e * 10, ck.checkpoint_name(e, e * 10), True) for e in range(1, 6)]
    partial_old = ck.CheckpointEntry(3, 35, ck.checkpoint_name(3, 35), False)
    partial_new = ck.CheckpointEntry(6, 60, ck.checkpoint_name(6, 60), False)
    doomed = ck.to_prune([*c, partial_old, partial_new], keep_last=2)
    assert [d.name for d in doomed] == [c[0].name, c[1].name, c[2].name, partial_old.name]
    assert ck.to_prune(c, keep_last=0) == []
    assert ck.to_prune(c, keep_last=1) == c[:4]
    assert ck.to_prune([partial_old], keep_last=1) == []  # nothing committed: touch nothing


@pytest.mark.parametrize(("before", "after", "every", "want"),
                         [(9, 10, 10, True), (8, 9, 10, False), (8, 12, 10, True), (10, 12, 10, False),
                          (0, 5, 0, False)])
def test_crossed(before, after, every, want):
    assert ck.crossed(before, after, every) is want


def test_is_due():
    assert ck.is_due(4, 2) and not ck.is_due(3, 2) and not ck.is_due(3, 0) and not ck.is_due(0, 1)


def test_rundir_upload_commit_list_download_prune(tmp_path):
    rd = RunDir(str(tmp_path / "runs"), "r1")
    rd.makedirs()
    src = tmp_path / "local"
    src.mkdir()
    (src / "ckpt.index").write_bytes(b"index")
    (src / "ckpt.data-00000-of-00001").write_bytes(b"x" * 1000)
    for epoch in (1, 2, 3):
        rd.checkpoints.upload(str(src), epoch, epoch * 10, {"attempt": 1})
    # A partial upload newer than everything (writer died before the marker): never selected.
    partial = tmp_path / "runs" / "r1" / CHECKPOINTS_DIR / ck.checkpoint_name(4, 40)
    partial.mkdir()
    (partial / "ckpt.index").write_bytes(b"half")
    latest = rd.checkpoints.latest()
    assert (latest.epoch, latest.step) == (3, 30)
    assert rd.read_json(f"{CHECKPOINTS_DIR}/{latest.name}/{ck.COMMIT_MARKER}")["attempt"] == 1
    prefix = rd.checkpoints.download(latest, str(tmp_path / "dl"))
    with open(prefix + ".index", "rb") as f:
        assert f.read() == b"index"
    assert rd.checkpoints.prune(keep_last=1) == [ck.checkpoint_name(1, 10), ck.checkpoint_name(2, 20)]
    assert sorted(os.listdir(tmp_path / "runs" / "r1" / CHECKPOINTS_DIR)) == [
        ck.checkpoint_name(3, 30), ck.checkpoint_name(4, 40)]


def test_rundir_atomic_write_leaves_no_temp_files(tmp_path):
    rd = RunDir(str(tmp_path), "r")
    rd.write_json("result.json", {"a": 1})
    rd.write_json("result.json", {"a": 2})
    assert rd.read_json("result.json") == {"a": 2}
    assert os.listdir(tmp_path / "r") == ["result.json"]


def test_rundir_pickles_by_uri(tmp_path):
    import pickle

    rd = pickle.loads(pickle.dumps(RunDir(str(tmp_path), "r")))
    assert rd.uri == os.path.join(str(tmp_path), "r")


def test_rundir_file_uri(tmp_path):
    rd = RunDir(f"file://{tmp_path}", "r")
    assert rd.uri == f"file://{tmp_path}/r"
    rd.write_json("result.json", {"ok": True})
    assert (tmp_path / "r" / "result.json").exists() and rd.read_json("result.json") == {"ok": True}


def test_redaction_masks_credentials_and_secret_env():
    from raytf.config import SECRET, load_config, redacted, to_yaml

    cfg = load_config({"train": {"entrypoint": "m:f"}},
                      ["storage.access_key=AKIA123", "storage.secret_key=shh",
                       "ray.runtime_env.env_vars.DB_PASSWORD=pw", "ray.runtime_env.env_vars.LOG_LEVEL=debug"])
    text = to_yaml(redacted(cfg))
    assert "AKIA123" not in text and "shh" not in text and "pw\n" not in text and "debug" in text
    assert redacted(cfg).storage.secret_key == SECRET and cfg.storage.secret_key == "shh"  # the original is intact


def test_a_committed_staged_replacement_stands_for_its_name_until_the_name_is_committed_again():
    name = ck.checkpoint_name(2, 20)
    staged = name + ck.STAGING_SUFFIX
    # The writer died after committing the replacement and deleting the old copy (or half copying it over).
    for dirs, committed in (({staged}, {staged}), ({name, staged}, {staged})):
        (e,) = ck.entries_from_listing(dirs, committed)
        assert (e.name, e.dir, e.committed) == (name, staged, True)
        assert ck.stale_staging(dirs, committed) == []
    # The old copy still committed (the replacement not yet, or the swap done but the staging not yet deleted).
    for committed in ({name}, {name, staged}):
        (e,) = ck.entries_from_listing({name, staged}, committed)
        assert (e.dir, e.committed) == (name, True)
        assert ck.stale_staging({name, staged}, committed) == [staged]


def _local_checkpoint(path, content: bytes) -> str:
    path.mkdir(parents=True, exist_ok=True)
    (path / "ckpt.index").write_bytes(b"index")
    (path / "ckpt.data-00000-of-00001").write_bytes(content)
    return str(path)


def test_rundir_replacing_a_committed_checkpoint_keeps_it_until_the_new_copy_is_committed(tmp_path, monkeypatch):
    rd = RunDir(str(tmp_path / "runs"), "r1")
    rd.makedirs()
    rd.checkpoints.upload(_local_checkpoint(tmp_path / "a", b"old" * 100), 1, 10, {"attempt": 1})

    def dies_mid_copy(*args, **kwargs) -> None:
        raise OSError("connection reset")

    monkeypatch.setattr(pafs, "copy_files", dies_mid_copy)  # storage gone mid-upload, every retry
    monkeypatch.setattr(rd.options, "upload_retries", 0)
    with pytest.raises(Exception, match="connection reset"):
        rd.checkpoints.upload(_local_checkpoint(tmp_path / "b", b"new" * 100), 1, 10, {"attempt": 2})
    latest = rd.checkpoints.latest()
    assert latest.dir == ck.checkpoint_name(1, 10)  # the committed copy is still there, and still the latest
    monkeypatch.undo()
    rd.checkpoints.upload(_local_checkpoint(tmp_path / "c", b"new" * 100), 1, 10, {"attempt": 3})
    prefix = rd.checkpoints.download(rd.checkpoints.latest(), str(tmp_path / "dl"))
    with open(prefix + ".data-00000-of-00001", "rb") as f:
        assert f.read() == b"new" * 100
    assert rd.read_json(f"{CHECKPOINTS_DIR}/{ck.checkpoint_name(1, 10)}/{ck.COMMIT_MARKER}")["attempt"] == 3
    rd.checkpoints.prune(keep_last=3)  # the dead writer's staging directory goes
    assert sorted(os.listdir(tmp_path / "runs" / "r1" / CHECKPOINTS_DIR)) == [ck.checkpoint_name(1, 10)]


def test_lineage_number_orders_checkpoints_not_the_programs_epoch():
    # A second Model.fit (or a retried script) counts epochs from 0 again: its checkpoints are still the newest.
    first_fit = [ck.checkpoint_name(e, e * 10, seq=e) for e in (1, 2, 3, 4)]
    second_fit = ck.checkpoint_name(1, 10, seq=5)
    legacy = ck.checkpoint_name(9, 90)  # a name from before lineage numbers: older than any numbered one
    assert ck.parse_full(second_fit) == (5, 1, 10) and ck.parse_name(second_fit) == (1, 10)
    assert ck.parse_full(legacy) == (0, 9, 90)
    dirs = [*first_fit, second_fit, legacy]
    entries = ck.entries_from_listing(dirs, committed=dirs)
    assert [e.name for e in entries] == [legacy, *first_fit, second_fit]
    assert ck.latest_committed(entries).name == second_fit
    # keep_last=3 keeps the three newest commits, whatever epochs they name.
    assert [e.name for e in ck.to_prune(entries, keep_last=3)] == [legacy, *first_fit[:2]]


def test_next_lineage_number_skips_partial_and_staged_numbers():
    assert ck.next_seq([]) == 1
    assert ck.next_seq([ck.checkpoint_name(4, 40)]) == 1  # legacy names only
    partial = ck.checkpoint_name(1, 10, seq=7)  # uncommitted: a writer died there; its number is not reused
    staged = ck.checkpoint_name(2, 20, seq=8) + ck.STAGING_SUFFIX
    assert ck.next_seq([ck.checkpoint_name(3, 30, seq=3), partial, staged, "other"]) == 9


def test_uploader_numbers_checkpoints_on_from_the_run_directory(tmp_path):
    from raytf._task.upload import Uploader
    from raytf.config import load_config

    cfg = load_config({"train": {"entrypoint": "m:f"}, "storage": {"path": str(tmp_path)},
                       "checkpoint": {"keep_last": 2}})
    rd = RunDir(cfg.storage, "r1")
    rd.checkpoints.upload(str(_local_checkpoint(tmp_path / "old", b"x")), 4, 40, {"attempt": 1}, seq=3)
    events = []
    up = Uploader(rd, cfg, lambda kind, payload: events.append((kind, payload)), lambda: None, None)
    uris = [up.submit(str(_local_checkpoint(tmp_path / f"l{i}", b"y")), 1 + i, 10 * (1 + i), {"attempt": 2})
            for i in range(2)]
    up.close()
    assert [u.rsplit("/", 1)[1] for u in uris] == [ck.checkpoint_name(1, 10, 4), ck.checkpoint_name(2, 20, 5)]
    assert [p["seq"] for k, p in events if k == "checkpoint"] == [4, 5]
    # Epoch 1 and 2 after epoch 4: the newest by lineage, and pruning kept them, not the old epoch 4.
    assert [e.name for e in rd.checkpoints.list()] == [ck.checkpoint_name(1, 10, 4), ck.checkpoint_name(2, 20, 5)]


@pytest.mark.parametrize("path,endpoint,scheme,warned", [
    ("s3://b/runs", "198.18.0.5:9000", "http", "198.18.0.5:9000"),
    ("s3://b/runs", "minio.example:9000", "http", "minio.example:9000"),
    ("s3://b/runs", "127.0.0.1:9000", "http", None),
    ("s3://b/runs", "localhost:9000", "http", None),
    ("s3://b/runs", "198.18.0.5:9000", "https", None),
    ("s3://b/runs?endpoint_override=198.18.0.5:9000&scheme=http", None, None, "198.18.0.5:9000"),
    ("./runs", "198.18.0.5:9000", "http", None),
])
def test_plain_http_to_another_host_is_named(path, endpoint, scheme, warned):
    from raytf._s3 import plain_http_endpoint
    from raytf.config import StorageConfig

    assert plain_http_endpoint(StorageConfig(path=path, endpoint_override=endpoint, scheme=scheme)) == warned


def test_uploader_keeps_only_the_uploads_not_done(tmp_path):
    """A long run commits a checkpoint every few seconds: the uploader holds the ones still going, not every one of
    the run (raytf issue 33's soak)."""
    import time

    from raytf._task.upload import Uploader
    from raytf.config import load_config

    cfg = load_config({"train": {"entrypoint": "m:f"}, "storage": {"path": str(tmp_path)},
                       "checkpoint": {"keep_last": 2}})
    rd = RunDir(cfg.storage, "r1")
    events = []
    up = Uploader(rd, cfg, lambda kind, payload: events.append((kind, payload)), lambda: None, None)
    for i in range(20):
        up.submit(str(_local_checkpoint(tmp_path / f"l{i}", b"y")), 1, i + 1, {"attempt": 1})
        deadline = time.monotonic() + 30
        while sum(k == "checkpoint" for k, _ in events) <= i and time.monotonic() < deadline:
            time.sleep(0.01)  # (waiting on the commit event the upload thread sends)
    assert len(up._pending) <= 2  # the last one, and the one before if its thread has not returned yet
    up.close()
    assert sum(k == "checkpoint" for k, _ in events) == 20


def test_a_copy_of_a_tf_checkpoint_directory_must_hold_the_checkpoint_its_state_file_names():
    """(raytf issue 55: an asynchronous CheckpointManager's copy named ckpt-40 and held no ckpt-40 file.)"""
    state = 'model_checkpoint_path: "ckpt-40"\nall_model_checkpoint_paths: "ckpt-35"\n'
    whole = ["checkpoint", "ckpt-40.index", "ckpt-40.data-00000-of-00002", "ckpt-40.data-00001-of-00002"]
    assert ck.tf_state_gaps(whole, state) is None
    assert ck.tf_state_gaps(["ckpt-35.index", "ckpt-35.data-00000-of-00001", "checkpoint"], state) == (
        "its checkpoint file names ckpt-40, but ckpt-40.index, ckpt-40.data-00000-of-00001 is not there")
    assert ck.tf_state_gaps(whole[:-1], state).endswith("ckpt-40.data-00001-of-00002 is not there")
    # Written by a program that saved elsewhere first: an absolute path, its name is what the copy holds.
    assert ck.tf_state_gaps(whole, 'model_checkpoint_path: "/old/place/ckpt-40"') is None
    assert ck.tf_state_gaps(["model.keras"], None) is None  # no state file: nothing it names
    assert ck.tf_state_gaps(whole, "garbage") == "its checkpoint file names no checkpoint"


def test_a_tf_checkpoint_directory_is_copied_as_its_newest_checkpoint_alone():
    """(raytf issue 55: the Model Garden keeps its last 5 checkpoints and TensorBoard's files in model_dir; all of it
    was copied and uploaded at every save.)"""
    names = ["checkpoint", "ckpt-30.index", "ckpt-30.data-00000-of-00001", "ckpt-40.index",
             "ckpt-40.data-00000-of-00001", "params.yaml", "train/events.out.tfevents.1.host", "sub/ckpt-40.index"]
    state = 'model_checkpoint_path: "ckpt-40"\nall_model_checkpoint_paths: "ckpt-30"\nall_model_checkpoint_paths: ' \
            '"ckpt-40"\n'
    keep, text = ck.tf_copy_set(names, state)
    assert keep == ["ckpt-40.data-00000-of-00001", "ckpt-40.index", "params.yaml"]
    assert text == 'model_checkpoint_path: "ckpt-40"\nall_model_checkpoint_paths: "ckpt-40"\n'
    assert ck.tf_state_gaps([*keep, "checkpoint"], text) is None
    assert ck.tf_newest('model_checkpoint_path: "/elsewhere/ckpt-7"') == "ckpt-7"


def test_every_tf_checkpoint_directory_in_a_scripts_directory_is_copied_whole():
    """A script's BackupAndRestore under its checkpoint directory, beside its ModelCheckpoint's state at the top:
    each directory with a state file gives its own newest checkpoint (raytf issue 71: the backup's state file was
    committed without the ckpt-3 it names, and the retry failed with NotFoundError)."""
    names = ["checkpoint", "ckpt-2.index", "ckpt-2.data-00000-of-00001", "ckpt-1.index", "ckpt-1.data-00000-of-00001",
             "backup/chief/checkpoint", "backup/chief/ckpt-3.index", "backup/chief/ckpt-3.data-00000-of-00001",
             "backup/chief/ckpt-2.index", "backup/chief/ckpt-2.data-00000-of-00001", "notes/params.yaml",
             "train/events.out.tfevents.1.host"]
    states = {"": 'model_checkpoint_path: "ckpt-2"\n', "backup/chief": 'model_checkpoint_path: "ckpt-3"\n'}
    keep, texts = ck.tf_copy_plan(names, states)
    assert keep == ["backup/chief/ckpt-3.data-00000-of-00001", "backup/chief/ckpt-3.index",
                    "ckpt-2.data-00000-of-00001", "ckpt-2.index", "notes/params.yaml"]
    assert texts["backup/chief"].startswith('model_checkpoint_path: "ckpt-3"')
    copy = [*keep, "checkpoint", "backup/chief/checkpoint"]
    assert ck.tf_copy_gaps(copy, texts) is None
    assert ck.tf_copy_gaps([n for n in copy if "ckpt-3.index" not in n], texts) == (
        "backup/chief/: its checkpoint file names ckpt-3, but ckpt-3.index is not there")
    # One state file at the top only: as tf_copy_set alone (a nested directory without one belongs to the top's).
    alone, text = ck.tf_copy_set(names[:5], states[""])
    assert ck.tf_copy_plan(names[:5], {"": states[""]}) == (alone, {"": text})


class _Refusing:
    """A RunDir's checkpoints whose uploads storage refuses (after their retries) while `refuse` is true."""

    def __init__(self, rd):
        self.rd, self.refuse, self.tries = rd, True, 0

    def __getattr__(self, name):
        return getattr(self.rd, name)

    def upload(self, *args, **kwargs):
        from raytf.errors import StorageError

        self.tries += 1
        if self.refuse:
            raise StorageError("uploading checkpoint failed after 6 tries: [Errno 1] Operation not permitted")
        return self.rd.upload(*args, **kwargs)


def _refusing_uploader(tmp_path, *overrides):
    from raytf._task.upload import Uploader
    from raytf.config import load_config

    cfg = load_config({"train": {"entrypoint": "m:f"}, "storage": {"path": str(tmp_path), "upload_backoff_s": 0.01}},
                      list(overrides))
    rd = RunDir(cfg.storage, "r1")
    refusing = _Refusing(rd.checkpoints)
    rd.__dict__["checkpoints"] = refusing  # (an instance attribute over RunDir's)
    events = []
    return Uploader(rd, cfg, lambda kind, payload: events.append((kind, payload)), lambda: None, None), rd, refusing, \
        events


def _wait_tries(refusing, n):
    import time

    deadline = time.monotonic() + 30
    while refusing.tries < n and time.monotonic() < deadline:
        time.sleep(0.01)  # (waiting on the upload thread's try)


def test_a_refused_checkpoint_is_skipped_training_goes_on_and_the_next_one_commits(tmp_path, caplog):
    """Storage refusing a commit (after its retries) is no failure of training (raytf issue 71): a warning, the next
    save tries again and commits."""
    up, rd, refusing, events = _refusing_uploader(tmp_path)
    with caplog.at_level(logging.WARNING):
        up.submit(str(_local_checkpoint(tmp_path / "l1", b"x")), 1, 10, {"attempt": 1})
        _wait_tries(refusing, 1)
        refusing.refuse = False
        up.submit(str(_local_checkpoint(tmp_path / "l2", b"y")), 2, 20, {"attempt": 1})  # (no raise: goes on)
        up.close()
    assert [e.name for e in rd.checkpoints.list() if e.committed] == [ck.checkpoint_name(2, 20, 2)]
    said = [r.getMessage() for r in caplog.records if "not committed" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"checkpoint {ck.checkpoint_name(1, 10, 1)} not committed")
    assert "the next save tries again" in said[0] and "storage.unwritable_timeout_s=600s" in said[0]
    assert not (tmp_path / "l1").exists()  # its files gone once a newer one committed
    assert [p["seq"] for k, p in events if k == "checkpoint"] == [2]  # only the commit is told to the driver


def test_the_last_checkpoint_refused_is_tried_again_at_the_end_and_past_the_bound_the_run_ends(tmp_path):
    """The task's end: its last checkpoint, refused, is committed once storage takes it (a run never ends succeeded
    without it); storage refusing every checkpoint for storage.unwritable_timeout_s ends the run in one line naming
    the error and the last checkpoint committed."""
    import threading

    from raytf._task.upload import StorageUnwritable

    up, rd, refusing, events = _refusing_uploader(tmp_path, "failure.hang_timeout_s=30")
    up.submit(str(_local_checkpoint(tmp_path / "l1", b"x")), 1, 10, {"attempt": 1})
    _wait_tries(refusing, 1)
    threading.Timer(0.3, lambda: setattr(refusing, "refuse", False)).start()  # storage comes back during close
    up.close()
    assert [e.name for e in rd.checkpoints.list() if e.committed] == [ck.checkpoint_name(1, 10, 1)]
    assert refusing.tries >= 2 and not (tmp_path / "l1").exists()
    # While it tries again, the rank is busy for what is left of the bound, not the hang timeout alone (storage
    # refusing it is no hang: the run ends as `storage`, not `hang`).
    (busy,) = [p for k, p in events if k == "busy" and p.what.startswith("committing its last checkpoint")]
    assert 30 + 590 < busy.allow_s <= 30 + 600 + 1

    up, rd, refusing, _ = _refusing_uploader(tmp_path / "b", "storage.unwritable_timeout_s=0.2")
    refusing.refuse = False
    up.submit(str(_local_checkpoint(tmp_path / "m1", b"x")), 1, 10, {"attempt": 1})
    _wait_tries(refusing, 1)
    refusing.refuse = True
    up.submit(str(_local_checkpoint(tmp_path / "m2", b"y")), 2, 20, {"attempt": 1})
    with pytest.raises(StorageUnwritable) as ended:
        up.close()
    line = str(ended.value)
    assert line.startswith("storage refused every checkpoint tried for ")
    assert f"(storage.unwritable_timeout_s=0.2) under {rd.uri}: uploading checkpoint failed after 6 tries" in line
    assert f"the last checkpoint committed is {ck.checkpoint_name(1, 10, 1)}: fix the storage" in line
    assert ended.value.failure_kind == "storage" and "\n" not in line
    assert not (tmp_path / "m2").exists()
