"""The storage marker as a task checks it (`RunDir.marker` -> `StorageMarker.visible`, in `TaskActor.address`): a
local run directory's with `os` (no pyarrow in the task before it answers), an object store's through RunDir."""

import pickle

import pytest

from raytf._storage import NODE_LOCAL_ROOT_ENV, RunDir, StorageMarker


def _on_another_node(marker: StorageMarker) -> StorageMarker:
    return pickle.loads(pickle.dumps(marker))  # as Ray sends it


def test_a_local_run_directory_is_checked_where_the_node_sees_it(tmp_path, monkeypatch):
    rd = RunDir(str(tmp_path / "runs"), "r")
    rd.makedirs()
    name = rd.write_storage_marker()
    marker = _on_another_node(rd.marker(name))
    assert marker.run_dir is None and marker.local_path == str(tmp_path / "runs" / "r" / name)
    assert marker.visible()
    assert not _on_another_node(rd.marker(".storage-check-none")).visible()
    # A node that sees local paths under another root (a node without the NFS mount: the test seam) does not see
    # it; once that root holds the same file, it does.
    monkeypatch.setenv(NODE_LOCAL_ROOT_ENV, str(tmp_path / "elsewhere"))
    assert not marker.visible()
    seen = tmp_path / "elsewhere" / str(tmp_path / "runs" / "r").lstrip("/")
    seen.mkdir(parents=True)
    (seen / name).write_text("x")
    assert marker.visible()
    rd.remove_storage_marker(name)
    monkeypatch.delenv(NODE_LOCAL_ROOT_ENV)
    assert not marker.visible()


def test_a_uri_is_checked_through_its_run_directory(tmp_path):
    rd = RunDir(f"file://{tmp_path}", "r")  # (a URI: pyarrow's filesystem, as for s3:// or gs://)
    rd.makedirs()
    name = rd.write_storage_marker()
    marker = _on_another_node(rd.marker(name))
    assert marker.local_path is None and isinstance(marker.run_dir, RunDir)
    assert marker.visible()
    rd.remove_storage_marker(name)
    assert not marker.visible()


def test_a_marker_is_checked_exactly_one_way(tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        StorageMarker(".storage-check-x")
    with pytest.raises(ValueError, match="exactly one"):
        StorageMarker(".storage-check-x", local_path=str(tmp_path), run_dir=RunDir(str(tmp_path), "r"))
