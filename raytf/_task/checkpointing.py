"""A TrainContext's checkpoint side: register what to checkpoint and restore it on resume, save and commit (the
chief's uploads run in the background), export the model at the end, and the evaluator's watch of new checkpoints."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any

from raytf._core import checkpoints, failure
from raytf._core import events as ev
from raytf._task.upload import Uploader, crash_seam

log = logging.getLogger(__name__)


class Checkpointing:
    """TrainContext's checkpoint methods, one of its base classes. They read the context's cfg, is_chief, attempt,
    rank, initial_epoch, _run_dir, _resume_from, _scratch and _wait_stop, and its StepCounter's epoch, step,
    heartbeat and _emit."""

    _writer = None  # tf_runtime.CheckpointWriter, once `restore` has registered what to checkpoint
    _uploader: Uploader | None = None  # the chief's, from its first commit

    def restore(self, **trackables: Any) -> int:
        """Register what to checkpoint (model=, optimizer=, any tf.train.Checkpoint trackable) and
        restore it from the latest committed checkpoint when resuming. Returns initial_epoch."""
        from raytf._task import tf_runtime

        self._writer = tf_runtime.CheckpointWriter(trackables, is_chief=self.is_chief,
                                                    scratch_root=self._scratch)
        if self._resume_from is not None:
            local = f"{self._scratch}/restore-{self._resume_from.name}"
            self._writer.restore(self._run_dir.checkpoints.download(self._resume_from, local),
                                 self._resume_from.name, partial=self.cfg.checkpoint.partial_restore)
            log.info("restored %s (epoch %d, step %d)", self._resume_from.name,
                     self._resume_from.epoch, self._resume_from.step)
        return self.initial_epoch

    def save(self) -> str | None:
        """Write a checkpoint of the registered objects now. Every task must call it (the save is
        collective); the chief's copy is then uploaded and committed in the background (one at a time, in
        order; at most storage.max_inflight_uploads checkpoints waiting or uploading). Returns the
        checkpoint's URI on the chief."""
        if self._writer is None:
            raise RuntimeError("ctx.save() before ctx.restore(model=..., ...): register what to checkpoint")
        from raytf._task import timing

        began = time.perf_counter()
        try:
            local = self._writer.write(self.epoch, self.step)
            if not self.is_chief:
                return None
            return self.commit(local)
        finally:
            timing.add_save(time.perf_counter() - began)  # save_s: what the training thread waited for

    def commit(self, local: str) -> str:
        """The chief: upload the checkpoint directory `local` (this task's own, deleted once uploaded) as the run's
        next checkpoint at the current epoch and step, in the background; returns its URI. `save` writes one and
        commits it; a Ray Train loop's `ray.train.report(checkpoint=...)` commits the directory it reported."""
        if self._uploader is None:
            self._uploader = Uploader(self._run_dir, self.cfg, self._emit, self.heartbeat, crash_seam(self),
                                      resumed_from=self._resume_from.name if self._resume_from else None)
        # (submit waits only when storage.max_inflight_uploads checkpoints are already waiting or uploading)
        return self._uploader.submit(local, self.epoch, self.step, {"attempt": self.attempt, "rank": self.rank})

    def download_resumed(self, local: str) -> str | None:
        """The checkpoint this attempt resumes from, copied into `local` with its files as they were committed (the
        commit marker left out); None when it starts afresh."""
        if self._resume_from is None:
            return None
        self._run_dir.checkpoints.download(self._resume_from, local, marker=False)
        return local

    def finish(self, completed: bool = True) -> None:
        """After the training function: export the model (when training completed), then wait for the
        uploads still running (heartbeating meanwhile); raises if one failed."""
        if completed and self.cfg.checkpoint.export_model and self._writer is not None:
            self.heartbeat()
            # The export and its upload may outlast the hang timeout on a large model and slow storage: say
            # so, with an allowance sized by the model's state (its last checkpoint).
            size = self._uploader.last_bytes if self._uploader is not None else 0
            self._emit(ev.BUSY, ev.Busy(what="exporting the model", allow_s=failure.busy_allowance_s(
                2 * size, self.cfg.failure.hang_timeout_s, self.cfg.storage.min_upload_mib_s)))
            try:
                local = self._writer.export_model()
                if local is not None:
                    uri = self._run_dir.checkpoints.upload_model(local)
                    shutil.rmtree(os.path.dirname(local), ignore_errors=True)
                    log.info("model exported to %s", uri)
            finally:
                self._emit(ev.BUSY, ev.Busy(what="", allow_s=0.0))
        if self._uploader is not None:
            self._uploader.close()

    def _checkpointing(self) -> bool:
        return self._writer is not None and (
            self.cfg.checkpoint.every_epochs > 0 or self.cfg.checkpoint.every_steps > 0
        )

    def watch_checkpoints(self, poll_s: float = 2.0) -> Iterator[checkpoints.CheckpointEntry]:
        """Evaluator: yield each newly committed checkpoint, already restored into the objects given to
        `restore`, until training is over; the final checkpoint is always yielded."""
        if self._writer is None:
            raise RuntimeError("ctx.watch_checkpoints() before ctx.restore(model=...): register what to load")
        seen = None
        while True:
            # Read "done" before listing: a checkpoint committed before the end is then always seen.
            done = self._wait_stop(0)
            latest = self._run_dir.checkpoints.latest()
            if latest is not None and latest != seen:
                seen = latest
                local = f"{self._scratch}/eval-{latest.name}"
                self._writer.restore(self._run_dir.checkpoints.download(latest, local), latest.name,
                                     partial=self.cfg.checkpoint.partial_restore, evaluator=True)
                shutil.rmtree(local, ignore_errors=True)
                self.epoch, self.step = latest.epoch, latest.step
                yield latest
                continue
            if done:
                return
            self._wait_stop(poll_s)
