"""A run directory on a disk that fills up (raytf issue 33): the checkpoint that does not fit fails the run with one
line saying so, the checkpoints committed before it stay whole, and none is ever half-written and committed. The
disk is a small tmpfs mounted for the test (root only)."""

import os
import subprocess

import pytest

import raytf
from raytf._storage import RunDir

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(300)]

CKPT_MIB = 2  # each checkpoint; the disk holds two of them and the run's other files, not a third


@pytest.fixture
def small_disk(tmp_path):
    path = tmp_path / "disk"
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    size_kib = (2 * CKPT_MIB + 1.5) * 1024
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size_kib)}k", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_fails_the_run_in_one_line_and_keeps_the_last_whole_checkpoint(fast_cfg, small_disk, no_leaks):
    cfg = fast_cfg("run.name=full", f"storage.path={small_disk}", "cluster.num_workers=1",
                   "train.entrypoint=tests.train_fns:big_checkpoints", f"train.params.mib={CKPT_MIB}", "train.epochs=4",
                   "train.steps_per_epoch=2", "checkpoint.keep_last=0", "checkpoint.export_model=false",
                   "failure.max_failures=0", "storage.upload_retries=1", "storage.upload_backoff_s=0.1")
    result = raytf.fit(cfg, quiet=True, raise_on_failure=False)
    assert result.status == "failed"
    first = str(result.error).splitlines()[0]
    assert "StorageError: uploading checkpoint ckpt-n00000003-e000003" in first, first
    assert "failed after 2 tries (no space left on the device)" in first, first
    rd = RunDir(str(small_disk), "full")
    # The two that fitted are committed and whole; the third, never committed, left nothing behind.
    assert [(e.epoch, e.committed) for e in rd.checkpoints.list()] == [(1, True), (2, True)]
    entry, refused = rd.checkpoints.trusted(set())
    assert entry.epoch == 2 and refused == []
    assert result.last_checkpoint.endswith(entry.name)
    assert result.attempts[-1]["error_type"] == "StorageError"
