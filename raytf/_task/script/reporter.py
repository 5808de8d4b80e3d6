"""Script mode, the child's side: `ScriptReporter` counts a script's steps and epochs (a StepCounter), sends
its metrics rows and heartbeats as JSON lines on the events pipe its raytf host reads, and snapshots the chief's
checkpoint directory for upload. No TensorFlow here: the Keras callback (keras_callback.ScriptCallback) and
`raytf.report` drive it."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Mapping
from typing import Any

from raytf._core import checkpoints
from raytf._core.events import EPOCH, STEP
from raytf._core.progress import StepCounter, scalars
from raytf._task.script import protocol

# A copy of the checkpoint directory that is not whole is made again this many times, COPY_BACKOFF_S more seconds
# apart each time, before it is given up.
COPY_TRIES = 3
COPY_BACKOFF_S = 0.5


def _files(root: str) -> list[str]:
    return [os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files]


def _states(root: str) -> dict[str, str]:
    """The TF state files under `root` that name a checkpoint: their directory (relative, "" the top) -> text."""
    found = {}
    for d, _, files in os.walk(root):
        if checkpoints.TF_STATE_FILE in files:
            with open(os.path.join(d, checkpoints.TF_STATE_FILE)) as f:
                text = f.read()
            if checkpoints.tf_newest(text) is not None:  # (one naming none: nothing to check; its files copied)
                rel = os.path.relpath(d, root)
                found["" if rel == "." else rel] = text
    return found


def _copy_whole(src: str, dst: str) -> str | None:
    """Copy the checkpoint directory `src` to `dst`; what is wrong with the copy (a file gone while it was copied, a
    named checkpoint not whole), or None. Each directory of TF checkpoints in it (a state file naming the newest: a
    ModelCheckpoint's, a BackupAndRestore's, a CheckpointManager's) gives its newest checkpoint and what else is
    there but other checkpoints and event files (checkpoints.tf_copy_plan); the rest is copied as it is."""
    try:
        states = _states(src)
        if not states:
            shutil.copytree(src, dst)
        else:
            names, states = checkpoints.tf_copy_plan(_files(src), states)
            os.makedirs(dst)
            for name in names:
                os.makedirs(os.path.dirname(os.path.join(dst, name)), exist_ok=True)
                shutil.copy2(os.path.join(src, name), os.path.join(dst, name))
            for d, text in states.items():
                os.makedirs(os.path.join(dst, d), exist_ok=True)
                with open(os.path.join(dst, d, checkpoints.TF_STATE_FILE), "w") as f:
                    f.write(text)
    except (shutil.Error, OSError) as e:
        # (A file listed, then gone: a writer pruned it meanwhile. Or the scratch disk failed.)
        return f"the copy failed ({type(e).__name__}: {str(e)[:300]})"
    return checkpoints.tf_copy_gaps(_files(dst), states)


def _tree_signature(root: str) -> tuple:
    """What a checkpoint directory holds, cheaply: (path, size, mtime) of every file."""
    sig = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            if checkpoints.TF_EVENTS in f:  # (TensorBoard's, beside the checkpoints: no change of them)
                continue
            p = os.path.join(dirpath, f)
            try:
                st = os.stat(p)
            except FileNotFoundError:  # deleted while we walked (a writer replacing its files)
                continue
            sig.append((os.path.relpath(p, root), st.st_size, st.st_mtime_ns))
    return tuple(sorted(sig))


class ScriptReporter(StepCounter):
    """The child-process side of script mode: a StepCounter whose rows and heartbeats go as JSON lines on the
    events pipe; also snapshots the chief's checkpoint directory for upload.

    Offers what `keras_callback.RaytfCallback` uses on a TrainContext (step_end, epoch_end, heartbeat, step,
    epoch, steps_per_epoch, num_replicas), so the same callback reports Keras `fit` in both modes."""

    def __init__(self, fd: int, *, every_steps: int, heartbeat_s: float, is_chief: bool, checkpoint_dir: str,
                 scratch: str, epoch: int = 0, step: int = 0, max_names: int | None = None) -> None:
        super().__init__(self._event, every_steps=every_steps, heartbeat_s=heartbeat_s, epoch=epoch, step=step,
                         max_names=max_names)
        self._fd = fd
        self._lock = threading.Lock()
        self.is_chief = is_chief
        self.checkpoint_dir = checkpoint_dir
        self._scratch = scratch
        self.num_replicas = 1
        self.steps_per_epoch: int | None = None
        self._synced = _tree_signature(checkpoint_dir)  # what a resume restored there is not new
        self._snapshots = 0
        self._base = (0, 0)  # (epochs, steps) done before the current fit, by earlier fits
        self._fit_epochs: int | None = None
        self._fit_begun = False
        self._counted = False  # a step of this attempt counted (a Keras fit, a raytf.report): its step names saves

    def _send(self, msg: protocol.Message) -> None:
        data = protocol.encode(msg)
        with self._lock:  # one line at a time (Keras callbacks and user threads may both report)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]

    def _event(self, kind: str, payload: dict[str, Any]) -> None:
        self._send(protocol.Relayed(kind, payload))

    # -- what keras_callback.ScriptCallback calls -------------------------------------------------------
    def report(self, metrics: Mapping[str, Any] | None, *, kind: str = STEP) -> None:
        self._counted = True
        super().report(metrics, kind=kind)

    def fit_started(self, *, replicas: int, epochs: int | None, steps_per_epoch: int | None) -> None:
        self._counted = True
        self.fit = (self.fit or 0) + 1
        self._fit_begun = False
        self.num_replicas, self.steps_per_epoch = replicas, steps_per_epoch
        self._fit_epochs = epochs

    def epoch_begin(self, epoch: int) -> None:
        """Keras' epoch index (0-based, within this fit): after a restore (BackupAndRestore) fit starts past 0."""
        if not self._fit_begun:
            self._fit_begun = True
            # A later fit that starts from epoch 0 (fine-tuning, say) counts on from the earlier ones, so its
            # checkpoints are the newest; one with initial_epoch set (fit one epoch at a time) says where it is.
            self._base = (self.epoch, self.step) if self.fit > 1 and epoch == 0 else (0, 0)
            # Told once the base is known: the driver shows this fit's epochs as 1..epochs, not the run's count.
            self._send(protocol.FitStarted(replicas=self.num_replicas, epochs=self._fit_epochs,
                                           steps_per_epoch=self.steps_per_epoch, fit=self.fit,
                                           base_epoch=self._base[0], base_step=self._base[1]))
        base_epoch, base_step = self._base
        self.epoch = base_epoch + epoch
        if self.steps_per_epoch:
            self.step = base_step + epoch * self.steps_per_epoch

    def epoch_end(self, metrics: Mapping[str, Any] | None = None) -> None:
        super().epoch_end(metrics)
        self.sync()  # after the user's callbacks (ours is added last): ModelCheckpoint has written

    # -- raytf.report(...) in a script ---------------------------------------------------------
    def report_explicit(self, metrics: Mapping[str, Any] | None, *, step: int | None, epoch: int | None,
                        kind: str, checkpoint: bool) -> None:
        if kind == EPOCH:
            self.epoch = epoch if epoch is not None else self.epoch + 1
            if step is not None:
                self.step = step
            self.report(metrics, kind=EPOCH)
        elif metrics or step is not None:
            if epoch is not None:
                self.epoch = epoch
            before = self.step
            self.step = step if step is not None else self.step + 1
            timing = self.steps_per_s(before)
            self.report({**scalars(metrics), **(self._sourced(timing) if timing else {})}, kind=STEP)
        if checkpoint:
            self.sync()

    # -- checkpoints ---------------------------------------------------------------------------
    def sync(self, number: int | None = None) -> bool:
        """Chief only: if the checkpoint directory changed since the last sync, copy it aside (so the script
        can go on writing) and hand the copy to the host for upload as checkpoint (epoch, step); `number`: the
        checkpoint's own (a CheckpointManager's), its step where the script counted none raytf saw in this attempt
        (a resumed one's count starts where it resumed, and counts no further).

        The copy must hold the checkpoint its state file names, whole (checkpoints.tf_state_gaps): a writer the
        script runs on a thread of its own may change the directory while it is copied (a file pruned, a state
        file naming a checkpoint not written yet: raytf issue 55). Such a copy is made again; one that cannot be
        made whole is raytf's storage failure (the host stops the script; the attempt is retried)."""
        if not self.is_chief:
            return False
        # (Not counted: its step is where the attempt resumed, the checkpoint's own number says where it is now.)
        step = number if number is not None and not self._counted else self.step
        problem = ""
        for attempt in range(COPY_TRIES):
            sig = _tree_signature(self.checkpoint_dir)
            if not sig or sig == self._synced:
                return False
            self._snapshots += 1
            snap = os.path.join(self._scratch, f"snapshot-{self._snapshots}")
            began = time.perf_counter()
            problem = _copy_whole(self.checkpoint_dir, snap)
            if problem is None:
                from raytf._task import timing  # (no TensorFlow import: timing imports it only when installed)

                timing.add_save(time.perf_counter() - began)  # save_s: the copy the script waits for (not the upload)
                self._synced = sig
                self._send(protocol.Sync(path=snap, epoch=self.epoch, step=step))
                return True
            shutil.rmtree(snap, ignore_errors=True)
            if attempt + 1 < COPY_TRIES:  # whoever writes there is at work still and tells nobody: a moment for it
                time.sleep(COPY_BACKOFF_S * (attempt + 1))
        self._send(protocol.SyncFailed(reason=f"{problem} (after {COPY_TRIES} copies)"))
        return False

    def owns(self, path: str) -> bool:
        """Whether `path` is in $RAYTF_CHECKPOINT_DIR (what sync uploads)."""
        root, path = os.path.realpath(self.checkpoint_dir), os.path.realpath(path)
        return path == root or path.startswith(root + os.sep)

    def exception(self, name: str, summary: str = "") -> None:
        """The script ended with an uncaught exception of this type (`summary`: in a few lines)."""
        try:
            self._send(protocol.Raised(type=name, summary=summary))
        except OSError:  # the host is gone: nobody to tell
            pass

    def close(self, ok: bool) -> None:
        """At exit: a successful script's last writes (model.save after fit, say) are synced too."""
        if ok:
            self.sync()
