"""A run directory on a disk that fills up (raytf issue 33): the checkpoints that do not fit are skipped until
storage.unwritable_timeout_s, then the run ends with one line saying so; the checkpoints committed before stay whole,
and none is ever half-written and committed. The disk is a small tmpfs mounted for the test (root only). And storage
that refuses writes for a while (raytf issue 71: `chattr +i`, which refuses root too): training goes on, the next
checkpoint commits, the run succeeds in one attempt; refused past the bound, the run ends in one line, and when
result.json cannot be written the terminal says so and names the last good checkpoint."""

import os
import re
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
                   "failure.max_failures=0", "storage.upload_retries=1", "storage.upload_backoff_s=0.1",
                   "storage.unwritable_timeout_s=2")
    result = raytf.fit(cfg, quiet=True, raise_on_failure=False)
    assert result.status == "failed"
    first = str(result.error).splitlines()[0]
    assert "StorageUnwritable: storage refused every checkpoint tried for " in first, first
    assert f"(storage.unwritable_timeout_s=2) under {small_disk}/full: uploading checkpoint ckpt-n00000004-e000004" \
        in first, first
    assert "failed after 2 tries (no space left on the device)" in first, first
    assert "the last checkpoint committed is ckpt-n00000002-e000002-s0000000004" in first, first
    rd = RunDir(str(small_disk), "full")
    # The two that fitted are committed and whole; the third, never committed, left nothing behind.
    assert [(e.epoch, e.committed) for e in rd.checkpoints.list()] == [(1, True), (2, True)]
    entry, refused = rd.checkpoints.trusted(set())
    assert entry.epoch == 2 and refused == []
    assert result.last_checkpoint.endswith(entry.name)
    assert (result.attempts[-1]["error_type"], result.attempts[-1]["cause"]) == ("StorageUnwritable", "storage")


@pytest.fixture
def refusing(tmp_path):
    """(freeze, thaw): make every directory of tmp_path/runs refuse new files (`chattr +i`), and undo it (also at
    the test's end)."""
    import shutil

    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    probe = tmp_path / "probe"
    probe.mkdir()
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(probe)]).returncode != 0:
        pytest.skip("chattr +i does not work here")
    subprocess.run(["chattr", "-i", str(probe)], check=True)

    def each_dir(flag):
        dirs = [str(p) for p in [runs, *runs.rglob("*")] if p.is_dir()]
        subprocess.run(["chattr", flag, *dirs], check=True)

    yield (lambda: each_dir("+i")), (lambda: each_dir("-i"))
    each_dir("-i")


def test_storage_refusing_writes_for_a_while_costs_no_attempt_and_past_the_bound_ends_the_run_in_one_line(
        fast_cfg, refusing, no_leaks, caplog, capfd):
    import logging

    freeze, thaw = refusing
    quick = ["train.entrypoint=tests.train_fns:paced_loop", "train.params.step_s=0.03", "train.epochs=5",
             "train.steps_per_epoch=30", "metrics.every_steps=10", "storage.upload_retries=1",
             "storage.upload_backoff_s=0.2", "failure.max_failures=0"]

    def refuse_between(first_commit: int, thaw_at_epoch: int | None):
        """An on_event: storage refuses from the commit of epoch `first_commit` to the epoch row `thaw_at_epoch`
        (None: to the test's end)."""
        frozen = []

        def on_event(e):
            if e.kind == "checkpoint" and e.payload["epoch"] == first_commit and not frozen:
                freeze()
                frozen.append(True)
            elif thaw_at_epoch is not None and e.kind == "epoch" and e.payload["epoch"] == thaw_at_epoch and frozen:
                thaw()

        return on_event

    # Refused from the first commit until epoch 4's row: epoch 2's (and maybe 3's) checkpoint is skipped, the run
    # trains on and commits the next, one attempt, succeeded.
    cfg = fast_cfg("run.name=refused", *quick)
    with caplog.at_level(logging.WARNING):
        result = raytf.fit(cfg, quiet=True, on_event=refuse_between(1, 4))
    assert result.status == "succeeded", result.error
    assert len(result.attempts) == 1 and result.last_checkpoint.endswith("-e000005-s0000000150")
    skipped = [line for line in capfd.readouterr().err.splitlines() if "not committed" in line]
    # (the freeze follows the driver's sight of epoch 1's commit: under load that can come after epoch 2's commit,
    # and the first checkpoint refused is then epoch 3's)
    assert skipped and re.search(r"checkpoint ckpt-n0000000[23]-e00000[23]-s00000000[69]0 not committed", skipped[0]), \
        skipped
    assert "Operation not permitted; training goes on and the next save tries again" in skipped[0]

    # Refused for good (past storage.unwritable_timeout_s=1): the run ends in one line naming the last checkpoint
    # committed; result.json cannot be written either, and the terminal says so and where the last good state is.
    cfg = fast_cfg("run.name=gone", *quick, "storage.unwritable_timeout_s=1")
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="raytf"):
        result = raytf.fit(cfg, quiet=True, raise_on_failure=False, on_event=refuse_between(1, None))
    assert result.status == "failed"
    first = str(result.error).splitlines()[0]
    assert "StorageUnwritable: storage refused every checkpoint tried for" in first, first
    committed = re.search(r"the last checkpoint committed is (ckpt-n0000000[12]-e00000[12]-s00000000[36]0): fix the "
                          r"storage", first)
    assert committed, first
    assert result.attempts[-1]["cause"] == "storage" and len(result.attempts) == 1
    unwritten = [r.getMessage() for r in caplog.records if r.getMessage().startswith("result.json not written")]
    assert len(unwritten) == 1 and "the run ended failed; its last committed checkpoint is " in unwritten[0]
    assert f"{committed[1]} (a relaunch of run.name=gone resumes from it)" in unwritten[0]
    assert not any("remote traceback" in r.getMessage() for r in caplog.records)  # (its line says all)
