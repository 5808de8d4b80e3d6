"""The chief's checkpoint uploads, in order and beside training, with a bound on checkpoints in flight."""

from __future__ import annotations

import shutil
import threading

from raytf._core import checkpoints
from raytf._core import events as ev
from raytf._storage import CHECKPOINTS_DIR, RunDir
from raytf.config import Config


class Uploader:
    """Uploads the chief's checkpoints one after the other, in order, beside training. Order matters:
    pruning deletes partial checkpoints older than the newest committed one."""

    def __init__(self, run_dir: RunDir, cfg: Config, emit, heartbeat, before_commit, on_error=None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.run_dir, self.cfg, self.emit, self.heartbeat, self.before_commit = (
            run_dir, cfg, emit, heartbeat, before_commit)
        self.on_error = on_error  # called from the upload thread when an upload fails (after its retries)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raytf-upload")
        self._slots = threading.Semaphore(cfg.storage.max_inflight_uploads)
        self._pending: list = []
        self._error: BaseException | None = None

    def submit(self, local: str, epoch: int, step: int, meta: dict) -> str:
        self._raise_if_failed()
        # The bound on checkpoints in flight: wait for a slot, telling the driver we are alive.
        while not self._slots.acquire(timeout=self.cfg.failure.heartbeat_s):
            self.heartbeat()
            self._raise_if_failed()
        if self._error is not None:  # an upload failed while we waited for the slot it freed
            self._slots.release()
            raise self._error
        self._pending.append(self._pool.submit(self._upload, local, epoch, step, meta))
        return self.run_dir.uri_of(CHECKPOINTS_DIR, checkpoints.checkpoint_name(epoch, step))

    def _upload(self, local: str, epoch: int, step: int, meta: dict) -> None:
        try:
            if self._error is not None:  # an earlier upload failed: the run is failing, this one is moot
                return
            uri = self.run_dir.upload_checkpoint(local, epoch, step, meta, before_commit=self.before_commit)
            self.emit(ev.CHECKPOINT, {"epoch": epoch, "step": step, "uri": uri})
            self.run_dir.prune_checkpoints(self.cfg.checkpoint.keep_last)
        except BaseException as e:
            self._error = e
            if self.on_error is not None:
                self.on_error(e)
            raise
        finally:
            shutil.rmtree(local, ignore_errors=True)
            self._slots.release()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        from concurrent.futures import wait

        while self._pending:
            _, not_done = wait(self._pending, timeout=self.cfg.failure.heartbeat_s)
            self.heartbeat()
            self._pending = list(not_done)
        self._pool.shutdown(wait=True)
        self._raise_if_failed()
