"""A committed checkpoint's files against its marker's SHA-256 manifest: what resume refuses, and the fallback to
the previous committed checkpoint. A local run directory, no Ray, no TF."""

import json

import pytest

from raytf import _storage as storage
from raytf._core import checkpoints as ck
from raytf._storage import retry, rundir


def _local_ckpt(tmp_path, name, content=b"weights"):
    src = tmp_path / "local" / name
    (src / "sub").mkdir(parents=True)
    (src / "ckpt.index").write_bytes(b"index-" + content)
    (src / "sub" / "ckpt.data-00000-of-00001").write_bytes(content * 100)
    return str(src)


@pytest.fixture
def rd(tmp_path):
    run = storage.RunDir(str(tmp_path / "runs"), "exp")
    run.makedirs()
    for seq in (1, 2, 3):
        run.checkpoints.upload(_local_ckpt(tmp_path, f"c{seq}", b"w%d" % seq), seq, seq * 10, {}, seq=seq)
    return run



def _ckpt(tmp_path, seq):
    return tmp_path / "runs" / "exp" / "checkpoints" / ck.checkpoint_name(seq, seq * 10, seq)


def test_the_marker_records_every_file_and_an_untouched_checkpoint_verifies(rd, tmp_path):
    marker = json.loads((_ckpt(tmp_path, 3) / ck.COMMIT_MARKER).read_text())
    files = marker[ck.MANIFEST_KEY]
    assert sorted(files) == ["ckpt.index", "sub/ckpt.data-00000-of-00001"]
    assert files["sub/ckpt.data-00000-of-00001"]["bytes"] == 200 and len(files["ckpt.index"]["sha256"]) == 64
    assert rd.checkpoints.verify(rd.checkpoints.latest()) is None
    verified = set()
    entry, refused = rd.checkpoints.trusted(verified)
    assert (entry.seq, refused) == (3, []) and verified == {entry.dir}


@pytest.mark.parametrize("tamper, why", [
    (lambda d: (d / "sub" / "ckpt.data-00000-of-00001").write_bytes(b"w9" * 100), "SHA-256"),  # same size
    (lambda d: (d / "ckpt.index").write_bytes(b"longer than it was"), "bytes, the manifest says"),
    (lambda d: (d / "sub" / "ckpt.data-00000-of-00001").unlink(), "is missing"),
    (lambda d: (d / "planted.py").write_text("import os"), "added after the commit"),
    (lambda d: (d / ck.COMMIT_MARKER).write_text(json.dumps({"epoch": 3, "step": 30})), "no file manifest"),
    (lambda d: (d / ck.COMMIT_MARKER).write_text("{not json"), "not JSON"),
], ids=["content", "size", "missing", "added", "no-manifest", "marker-garbage"])
def test_a_changed_checkpoint_is_refused_and_the_previous_one_used(rd, tmp_path, tamper, why):
    tamper(_ckpt(tmp_path, 3))
    entry, refused = rd.checkpoints.trusted(set())
    assert entry.seq == 2
    assert [(r.seq, why in problem) for r, problem in refused] == [(3, True)], refused


def test_verified_checkpoints_are_not_read_again_and_none_left_means_none(rd, tmp_path):
    verified = set()
    rd.checkpoints.trusted(verified)
    (_ckpt(tmp_path, 3) / "ckpt.index").write_bytes(b"index-w9")  # after this process verified it: not re-read
    assert rd.checkpoints.trusted(verified)[0].seq == 3
    for seq in (1, 2, 3):
        (_ckpt(tmp_path, seq) / "ckpt.index").write_bytes(b"index-zz")
    entry, refused = rd.checkpoints.trusted(set())
    assert entry is None and [r.seq for r, _ in refused] == [3, 2, 1]


def test_manifest_problems_are_pure_and_name_the_file():
    good = {"a": {"bytes": 3, "sha256": "ab" * 32}}
    assert ck.manifest_problem(good, {"a": 3}) is None
    assert ck.manifest_problem(None, {"a": 3}).startswith("its commit marker has no file manifest")
    assert ck.manifest_problem({"a": {"bytes": "3"}}, {"a": 3}) == "its commit marker's file manifest is malformed"
    assert ck.manifest_problem(good, {"a": 3, "b": 1, "c": 1}) == "b was added after the commit (and 1 more)"
    assert ck.digest_problem(good, "a", "cd" * 32).startswith("a's SHA-256 is cdcdcdcdcdcd...")
    assert ck.digest_problem(good, "a", "ab" * 32) is None


def test_a_file_the_copy_silently_dropped_is_copied_again_before_the_commit(tmp_path, monkeypatch):
    """pyarrow's copy_files can return without an error when an upload failed (26.0.1, S3 with connections reset):
    the upload checks the copy by name and size, so the retry copies the file again and the marker never commits a
    checkpoint without it (tests/ray/test_s3_faults.py found it through the fault proxy)."""
    run = storage.RunDir(str(tmp_path / "runs"), "exp")
    run.makedirs()
    real, calls = rundir.pafs.copy_files, []

    def copy_files(src, dest, **kw):  # the first copy loses the data file, silently
        calls.append(dest)
        real(src, dest, **kw)
        if len(calls) == 1:
            (tmp_path / "runs" / "exp" / "checkpoints" / ck.checkpoint_name(1, 10, 1) / "sub" /
             "ckpt.data-00000-of-00001").unlink()

    monkeypatch.setattr(rundir.pafs, "copy_files", copy_files)
    monkeypatch.setattr(retry.time, "sleep", lambda s: None)  # (the retries' back-off)
    run.checkpoints.upload(_local_ckpt(tmp_path, "c1"), 1, 10, {}, seq=1)
    assert len(calls) == 2
    assert run.checkpoints.verify(run.checkpoints.latest()) is None
