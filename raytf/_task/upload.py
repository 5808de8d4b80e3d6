"""The chief's checkpoint uploads, in order and beside training, with a bound on checkpoints in flight."""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from raytf._core import backoff, checkpoints, failure
from raytf._core import events as ev
from raytf._storage import CHECKPOINTS_DIR, RunDir
from raytf.config import Config
from raytf.errors import RaytfError, StorageError

log = logging.getLogger(__name__)

# Test seam: seconds each checkpoint upload takes at least (storage slower than failure.hang_timeout_s).
UPLOAD_DELAY_ENV = "RAYTF_TEST_UPLOAD_DELAY_S"


def upload_outputs(run_dir: RunDir, local_dir: str, rel: str, what: str) -> None:
    """What a task's program wrote into one of its own directories (its log directory, its working directory), to
    <run>/<rel>/ when there is anything, whatever the outcome (a failed run's outputs matter most). A failure to
    upload them is logged, never the task's failure."""
    if not any(files for _, _, files in os.walk(local_dir)):
        return
    try:
        run_dir.upload_dir(local_dir, rel)
    except (OSError, RaytfError) as e:
        log.warning("%s was not uploaded to %s: %s", what, run_dir.uri_of(rel), e)


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


CRASH_SEAM_ENV = "RAYTF_TEST_CRASH_BEFORE_COMMIT"


def crash_seam(ctx) -> Callable[[], None]:
    """Test seam (RAYTF_TEST_CRASH_BEFORE_COMMIT="<epoch>:<attempt>"), called before each commit: die like a killed
    chief would, with the checkpoint's files uploaded but not committed (`ctx`'s epoch and attempt then)."""
    def seam() -> None:
        if os.environ.get(CRASH_SEAM_ENV) == f"{ctx.epoch}:{ctx.attempt}":
            os._exit(137)

    return seam


@dataclass(frozen=True)
class _Submitted:
    """A checkpoint to commit: its local files and its place in the lineage."""

    local: str
    epoch: int
    step: int
    meta: dict
    seq: int


class StorageUnwritable(StorageError):
    """Storage refused every checkpoint tried for storage.unwritable_timeout_s: the run ends (failure.STORAGE: a retry
    would commit nothing either); the line names the path, the error and the last checkpoint committed."""

    failure_kind = failure.STORAGE


class Uploader:
    """Uploads the chief's checkpoints one after the other, in order, beside training. Order matters:
    pruning deletes partial checkpoints older than the newest committed one.

    A checkpoint whose upload fails its retries (storage.upload_retries: an outage, refused writes) is skipped with
    a warning and training goes on: the next save tries again (raytf issue 71: a 10 s refusal failed the run). Only
    storage that refuses every checkpoint for storage.unwritable_timeout_s ends the run (StorageUnwritable)."""

    def __init__(self, run_dir: RunDir, cfg: Config, emit, heartbeat, before_commit, on_error=None,
                 resumed_from: str | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.run_dir, self.cfg, self.emit, self.heartbeat, self.before_commit = (
            run_dir, cfg, emit, heartbeat, before_commit)
        self.on_error = on_error  # called from the upload thread when an upload fails (after its retries)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raytf-upload")
        self._slots = threading.Semaphore(cfg.storage.max_inflight_uploads)
        self._pending: list = []
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self.inflight_bytes = 0  # of the checkpoints waiting or uploading
        self._seq: int | None = None  # the lineage number of the next checkpoint submitted (numbered in order)
        self.last_bytes = 0  # of the last checkpoint submitted: the size of this model's state
        self._failing_since: float | None = None  # monotonic: the first of the checkpoints skipped in a row
        # the name of the last checkpoint committed: this uploader's, else the one the attempt resumed from
        self._committed: str | None = resumed_from
        self._skipped: _Submitted | None = None  # the newest checkpoint storage refused, nothing newer committed
        self._warned: str | None = None  # the checkpoint whose refusal was said

    def busy(self, what: str | None, nbytes: int = 0, more_s: float = 0.0) -> None:
        """Tell the driver this rank is busy (its peers wait for it in their next collective) for at most the
        time `nbytes` take at storage.min_upload_mib_s on top of the hang timeout, and `more_s`; None: no longer."""
        allow = 0.0 if what is None else more_s + failure.busy_allowance_s(
            nbytes, self.cfg.failure.hang_timeout_s, self.cfg.storage.min_upload_mib_s)
        self.emit(ev.BUSY, ev.Busy(what=what or "", allow_s=allow))

    def submit(self, local: str, epoch: int, step: int, meta: dict) -> str:
        self._raise_if_failed()
        nbytes = dir_bytes(local)
        # The bound on checkpoints in flight: wait for a slot, telling the driver we are alive and why the
        # other ranks are silent.
        if not self._slots.acquire(blocking=False):
            self.busy("waiting for an upload slot", self.inflight_bytes)
            try:
                while not self._slots.acquire(timeout=self.cfg.failure.heartbeat_s):
                    self.heartbeat()
                    self._raise_if_failed()
            finally:
                self.busy(None)
        if self._error is not None:  # an upload failed while we waited for the slot it freed
            self._slots.release()
            raise self._error
        with self._lock:
            self.inflight_bytes += nbytes
        self.last_bytes = nbytes
        if self._seq is None:  # one uploader per run at a time (the chief's): numbering on from the listing is safe
            self._seq = self.run_dir.checkpoints.next_seq()
        seq, self._seq = self._seq, self._seq + 1
        # Only the uploads not done yet: a long run commits thousands of checkpoints (raytf issue 33), and a done
        # one's failure is in self._error already.
        self._pending = [f for f in self._pending if not f.done()]
        self._pending.append(self._pool.submit(self._upload, local, epoch, step, meta, nbytes, seq))
        return self.run_dir.uri_of(CHECKPOINTS_DIR, checkpoints.checkpoint_name(epoch, step, seq))

    def _upload(self, local: str, epoch: int, step: int, meta: dict, nbytes: int = 0, seq: int = 0) -> None:
        try:
            if self._error is not None:  # an earlier upload failed: the run is failing, this one is moot
                return
            self._drop_skipped()  # (this newer checkpoint supersedes it)
            delay = float(os.environ.get(UPLOAD_DELAY_ENV) or 0)
            if delay:
                time.sleep(delay)  # the test seam's slow storage
            self._commit(_Submitted(local, epoch, step, meta, seq))
        except BaseException as e:
            self._error = e
            if self.on_error is not None:
                self.on_error(e)
            raise
        finally:
            if self._skipped is None or self._skipped.local != local:
                shutil.rmtree(local, ignore_errors=True)
            with self._lock:
                self.inflight_bytes -= nbytes
            self._slots.release()

    def _commit(self, ckpt: _Submitted) -> bool:
        """Upload and commit `ckpt`; False when storage refused it within the bound (it is then the one skipped,
        its files kept)."""
        name = checkpoints.checkpoint_name(ckpt.epoch, ckpt.step, ckpt.seq)
        try:
            uri = self.run_dir.checkpoints.upload(ckpt.local, ckpt.epoch, ckpt.step, ckpt.meta,
                                                  before_commit=self.before_commit, seq=ckpt.seq)
        except StorageError as e:
            self._skip(name, e)
            self._skipped = ckpt
            return False
        self._failing_since, self._committed, self._skipped = None, name, None
        self.emit(ev.CHECKPOINT, ev.Committed(epoch=ckpt.epoch, step=ckpt.step, seq=ckpt.seq, uri=uri))
        try:
            self.run_dir.checkpoints.prune(self.cfg.checkpoint.keep_last)
        except StorageError as e:  # (committed: the old ones go at the next commit's prune)
            log.warning("old checkpoints not pruned after %s: %s; the next commit prunes them", name, e)
        return True

    def _skip(self, name: str, error: StorageError) -> None:
        """A checkpoint not committed (its retries spent): training goes on, unless storage has refused every
        checkpoint for storage.unwritable_timeout_s (then raised: the run ends)."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        bound = self.cfg.storage.unwritable_timeout_s
        if now - self._failing_since >= bound:
            last = (f"the last checkpoint committed is {self._committed}: fix the storage, then relaunch to resume "
                    f"from it" if self._committed else "no checkpoint was committed: fix the storage, then relaunch")
            raise StorageUnwritable(
                f"storage refused every checkpoint tried for {now - self._failing_since:.0f}s (storage."
                f"unwritable_timeout_s={bound:g}) under {self.run_dir.uri}: {error}; {last}") from error
        if name != self._warned:  # (once a checkpoint: the task's end tries its last one again and again)
            self._warned = name
            log.warning("checkpoint %s not committed: %s; training goes on and the next save tries again (the run "
                        "ends if storage refuses every checkpoint for storage.unwritable_timeout_s=%gs)", name, error,
                        bound)

    def _window_s(self) -> float:
        """What is left of storage.unwritable_timeout_s since storage began refusing (all of it when it has not)."""
        bound = self.cfg.storage.unwritable_timeout_s
        return bound if self._failing_since is None else max(0.0, self._failing_since + bound - time.monotonic())

    def _drop_skipped(self) -> None:
        if self._skipped is not None:
            shutil.rmtree(self._skipped.local, ignore_errors=True)
            self._skipped = None

    def _commit_skipped(self) -> None:
        """The task's end: the last checkpoint, if storage refused it, tried again until it commits or the bound
        passes (raised): a run never ends `succeeded` without its last checkpoint."""
        last = self._skipped
        try:
            while self._skipped is not None and not self._commit(self._skipped):
                time.sleep(backoff.delay(1, self.cfg.storage.upload_backoff_s))  # (each try retried already)
        except BaseException as e:
            self._error = e
            raise
        finally:
            self._skipped = None
            if last is not None:
                shutil.rmtree(last.local, ignore_errors=True)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def abandon(self) -> None:
        """The task is ending without waiting: uploads not started are dropped (the one under way finishes)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        from concurrent.futures import wait

        if any(not f.done() for f in self._pending):
            self.busy("finishing its checkpoint uploads", self.inflight_bytes)
        try:
            while self._pending:
                _, not_done = wait(self._pending, timeout=self.cfg.failure.heartbeat_s)
                self.heartbeat()
                self._pending = list(not_done)
            if self._skipped is not None and self._error is None:
                # (busy for the rest of storage.unwritable_timeout_s too: storage refusing it is not a hang)
                self.busy("committing its last checkpoint (storage refused it)", self.last_bytes, self._window_s())
                last = self._pool.submit(self._commit_skipped)
                while wait([last], timeout=self.cfg.failure.heartbeat_s).not_done:
                    self.heartbeat()
        finally:
            self.busy(None)
        self._pool.shutdown(wait=True)
        self._raise_if_failed()
