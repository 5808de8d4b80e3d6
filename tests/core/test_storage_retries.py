"""Every access to the run directory goes through one retry rule (raytf/_storage/rundir.py RunDir.retried):
reads, listings, `exists`, the marker checks, the checkpoints' listing and `latest`, `runs ls/show`, whatever the
filesystem. A pyarrow filesystem (pyarrow.fs.PyFileSystem over a handler) that fails the first N calls of an
operation stands for storage that blips (NFS that stalls, a client without retries of its own). No Ray."""

import errno
import logging

import pyarrow.fs as pafs
import pytest

from raytf import _storage as storage
from raytf import runs
from raytf._storage import retry, rundir
from raytf.config import StorageConfig
from raytf.errors import StorageError


class FlakyHandler(pafs.FileSystemHandler):
    """The local filesystem, except that each operation named in `fails` raises OSError (a reset connection) its
    first N times; `calls` counts every operation."""

    def __init__(self, fails: dict[str, int], error: int = errno.ECONNRESET) -> None:
        self.local, self.fails, self.error = pafs.LocalFileSystem(), dict(fails), error
        self.calls: dict[str, int] = {}

    def fail(self, error: int = errno.ECONNRESET, **times: int) -> None:
        """From now: each operation named fails its next `times` calls; the counts start again."""
        self.fails, self.error, self.calls = dict(times), error, {}

    def _op(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.fails.get(name, 0) > 0:
            self.fails[name] -= 1
            raise OSError(self.error, f"{name}: {errno.errorcode[self.error]} (injected)")

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def get_type_name(self):
        return "flaky"

    def normalize_path(self, path):
        return path

    def equals(self, other):
        return self is other

    def get_file_info(self, paths):
        self._op("get_file_info")
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector):
        self._op("list")
        return self.local.get_file_info(selector)

    def create_dir(self, path, recursive):
        self._op("create_dir")
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self._op("delete_dir")
        self.local.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise OSError("not here")

    def delete_file(self, path):
        self._op("delete_file")
        self.local.delete_file(path)

    def move(self, src, dest):
        self._op("move")
        self.local.move(src, dest)

    def copy_file(self, src, dest):
        self._op("copy_file")
        self.local.copy_file(src, dest)

    def open_input_stream(self, path):
        self._op("read")
        return self.local.open_input_stream(path)

    def open_input_file(self, path):
        self._op("read")
        return self.local.open_input_file(path)

    def open_output_stream(self, path, metadata):
        self._op("write")
        return self.local.open_output_stream(path)

    def open_append_stream(self, path, metadata):
        return self.local.open_append_stream(path)


OPTIONS = dict(upload_retries=3, upload_backoff_s=0.0)


def flaky_run_dir(tmp_path, monkeypatch, fails: dict[str, int], name: str = "r") -> tuple[storage.RunDir, FlakyHandler]:
    """A run directory under tmp_path whose filesystem fails as `fails` says (set once it is made)."""
    handler = FlakyHandler({})
    real = rundir.resolve

    def resolve(path, options=None):
        _, inner, uri = real(path, options)
        return pafs.PyFileSystem(handler), inner, uri

    monkeypatch.setattr(rundir, "resolve", resolve)
    rd = storage.RunDir(StorageConfig(path=str(tmp_path / "runs"), **OPTIONS), name)
    rd.makedirs()
    handler.fail(**fails)
    return rd, handler


def _checkpoint(tmp_path, rd, epoch: int) -> None:
    local = tmp_path / f"local{epoch}"
    local.mkdir()
    (local / "ckpt.index").write_bytes(b"i" * epoch)
    rd.checkpoints.upload(str(local), epoch, epoch * 10, {"attempt": 1}, seq=epoch)


def test_reads_listings_and_exists_are_retried(tmp_path, monkeypatch, caplog):
    rd, fs = flaky_run_dir(tmp_path, monkeypatch, {})
    rd.write_json(storage.RESULT_FILE, {"status": "running"})
    _checkpoint(tmp_path, rd, 1)
    _checkpoint(tmp_path, rd, 2)
    fs.fail(get_file_info=2, read=2, list=2)
    with caplog.at_level(logging.WARNING):
        assert rd.exists(storage.RESULT_FILE)
        assert rd.read_json(storage.RESULT_FILE) == {"status": "running"}
        assert [e.epoch for e in rd.checkpoints.list()] == [1, 2]
    assert fs.calls == {"get_file_info": 3, "read": 3, "list": 3}  # each failed twice, then got through
    assert caplog.text.count("retrying in") == 6 and "injected" in caplog.text
    # The marker checks, the checkpoint a retry resumes from, and the check of its files against its manifest.
    marker = rd.write_storage_marker()
    fs.fail(get_file_info=2, list=2, read=2)
    assert rd.can_see(marker)
    assert rd.checkpoints.latest().epoch == 2
    entry, refused = rd.checkpoints.trusted(set())
    assert entry.epoch == 2 and refused == []


def test_what_fails_every_try_is_one_storage_error_naming_it(tmp_path, monkeypatch):
    rd, fs = flaky_run_dir(tmp_path, monkeypatch, {})
    fs.fail(list=99)
    with pytest.raises(StorageError, match=r"listing the checkpoints failed after 4 tries: .*ECONNRESET"):
        rd.checkpoints.latest()
    assert fs.calls["list"] == 4  # storage.upload_retries=3, then given up
    # A marker check that never gets through: the task does not see the run directory (no exception to its caller).
    fs.fail(get_file_info=99)
    assert rd.can_see(".storage-check-x") is False


def test_an_answer_is_not_retried(tmp_path, monkeypatch):
    rd, fs = flaky_run_dir(tmp_path, monkeypatch, {})
    with pytest.raises(FileNotFoundError):
        rd.read_json("nothing-here.json")
    assert fs.calls == {"read": 1}
    assert not rd.exists("nothing-here.json") and fs.calls["get_file_info"] == 1


def test_a_full_disk_leaves_no_partial_file_and_says_so(tmp_path, monkeypatch):
    rd, fs = flaky_run_dir(tmp_path, monkeypatch, {})
    rd._local = True  # (as a LocalFileSystem is: a temporary file, then moved over the old one)
    rd.write_json(storage.RESULT_FILE, {"status": "running"})
    fs.fail(errno.ENOSPC, move=99)  # the new copy is written, and cannot take the old one's place
    with pytest.raises(StorageError, match=r"writing .*result.json failed after 4 tries \(no space left on the "
                                           r"device\)"):
        rd.write_json(storage.RESULT_FILE, {"status": "succeeded"})
    assert rd.read_json(storage.RESULT_FILE) == {"status": "running"}
    assert [p.name for p in (tmp_path / "runs" / "r").iterdir()] == [storage.RESULT_FILE]  # no temporary left


def test_a_checkpoint_whose_upload_fails_is_never_committed(tmp_path, monkeypatch):
    rd, fs = flaky_run_dir(tmp_path, monkeypatch, {})
    _checkpoint(tmp_path, rd, 1)
    fs.fail(errno.ENOSPC, write=99)
    with pytest.raises(StorageError, match=r"uploading checkpoint .* \(no space left on the device\)"):
        _checkpoint(tmp_path, rd, 2)
    fs.fail()
    # Never committed, and its partial copy gone (on a full disk, the room the run's record needs).
    assert [(e.epoch, e.committed) for e in rd.checkpoints.list()] == [(1, True)]
    assert rd.checkpoints.latest().epoch == 1 and rd.checkpoints.trusted(set()) == (rd.checkpoints.latest(), [])


def test_runs_ls_and_show_are_retried(tmp_path, monkeypatch):
    rd, fs = flaky_run_dir(tmp_path, monkeypatch, {}, name="exp1")
    rd.write_json(storage.RESULT_FILE, {"run": "exp1", "status": "succeeded", "strategy": "mirrored"})
    slept: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)  # (the CLI opens the storage with its defaults)
    fs.fail(list=2, read=2, get_file_info=2)
    assert [r["run"] for r in runs.ls(str(tmp_path / "runs"))] == ["exp1"]
    assert fs.calls == {"get_file_info": 3, "list": 3, "read": 3}
    # The same back-off as uploads: storage.upload_backoff_s (0.5 s by default), doubling.
    assert slept == [0.5, 1.0] * 3
    fs.fail(read=2, get_file_info=2)
    assert runs._not_a_run(str(tmp_path / "runs" / "exp1")) is None
    assert runs._summary(storage.RunDir.at(str(tmp_path / "runs" / "exp1")))["status"] == "succeeded"
    assert fs.calls == {"get_file_info": 3, "read": 3}


def test_tensorboard_files_on_a_full_disk_are_given_up_never_the_run(tmp_path, monkeypatch, caplog):
    """The driver's TensorBoard sink writes in place on a local run directory: a full disk there costs the files,
    with one warning, not the run (the driver's event loop goes on)."""
    from tensorboardX.event_file_writer import EventsWriter

    from raytf._core import events as ev
    from raytf._driver.sinks import TensorBoardSink

    sink = TensorBoardSink(storage.RunDir(str(tmp_path / "runs"), "r"))
    row = ev.Event(ev.STEP, "worker", 0, 1, {"epoch": 1, "step": 1, "metrics": {"loss": 1.0}})
    sink(row)
    writes = []

    def full(self, event):
        writes.append(event)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(EventsWriter, "write_event", full)
    with caplog.at_level(logging.WARNING, logger="raytf"):
        for _ in range(3):
            sink(row)
        sink.close()
    assert len(writes) == 1 and sink.failed
    assert caplog.text.count("are no longer written") == 1 and "No space left" in caplog.text


def test_a_refused_write_is_retried_a_refused_read_is_an_answer(tmp_path, monkeypatch):
    """Storage that refuses writes for a while (permissions being fixed, credentials refreshed) is an outage to a
    write: retried with the back-off, so a commit goes through (raytf issue 71: a 10 s refusal failed the run as the
    program's error). A refused read is an answer: said at once."""
    monkeypatch.setattr(retry.time, "sleep", lambda s: None)
    tries = []

    def refused_twice():
        tries.append(1)
        if len(tries) <= 2:
            raise PermissionError(13, "Permission denied", "/runs/r/checkpoints")
        return "written"

    assert retry.with_retries("writing x", refused_twice, 3, 0.0, retry.WRITE_ANSWERS) == "written"
    assert len(tries) == 3
    tries.clear()
    with pytest.raises(PermissionError):
        retry.with_retries("reading x", refused_twice, 3, 0.0)
    assert len(tries) == 1
    rd = storage.RunDir(StorageConfig(path=str(tmp_path / "runs"), **OPTIONS), "r")
    tries.clear()
    assert rd.retried("writing x", refused_twice, writes=True) == "written" and len(tries) == 3


def test_result_json_is_strict_json(tmp_path):
    """A metric that is not finite was written as Python's `Infinity`, which strict readers refuse (raytf issue 71):
    written as its string now."""
    import json

    rd = storage.RunDir(str(tmp_path), "r")
    rd.write_json(storage.RESULT_FILE, {"final_metrics": {"loss": float("inf"), "gap": float("-inf"),
                                                          "acc": float("nan"), "ok": 1.5}, "rows": [float("inf")]})

    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    back = json.loads((tmp_path / "r" / storage.RESULT_FILE).read_text(), parse_constant=refuse)
    assert back == {"final_metrics": {"loss": "inf", "gap": "-inf", "acc": "nan", "ok": 1.5}, "rows": ["inf"]}
