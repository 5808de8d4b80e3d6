"""`raytf.report(...)`: one call that sends a metrics row to the driver, from a training function or from an
unmodified script run with train.script. Light on purpose (no Ray, TensorFlow or pyarrow): a script imports it.

In script mode the task's child process writes JSON lines to a pipe its raytf host reads (`ScriptReporter`);
the host turns them into events on the bus. Run by hand, outside raytf, `report` does nothing, so the same
script runs both ways.
"""

from __future__ import annotations

import json
import logging
import numbers
import os
import shutil
import threading
import time
from collections.abc import Mapping
from typing import Any

from raytf.checkpoints import crossed

log = logging.getLogger("raytf")

STEP, EPOCH = "step", "epoch"

_sink: Any = None  # the TrainContext (function mode) or ScriptReporter (script mode) of this process


def _scalar(value: Any) -> float | None:
    """A metric value as a float (tensors and numpy scalars included), or None if not a scalar."""
    if isinstance(value, numbers.Number):
        return float(value)
    try:
        if hasattr(value, "fetch"):  # a ParameterServerStrategy RemoteValue: waits for its closure
            value = value.fetch()
        return float(value.numpy() if hasattr(value, "numpy") else value)
    except (TypeError, ValueError):
        return None


def _scalars(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    out = {}
    for k, v in (metrics or {}).items():
        f = _scalar(v)
        if f is not None:
            out[str(k)] = f
    return out


class Cadence:
    """When step metrics are due (the first step of a process always is: launch-to-first-step), and the
    steps/s since the last reported row."""

    def __init__(self, every_steps: int, step: int) -> None:
        self.every = every_steps
        self._clock = (time.monotonic(), step)
        self._stepped = False

    def row(self, metrics: Mapping[str, Any] | None, before: int, after: int) -> dict[str, float] | None:
        first, self._stepped = not self._stepped, True
        if not (first or crossed(before, after, self.every)):
            return None
        now = time.monotonic()
        t0, s0 = self._clock
        row = _scalars(metrics)
        if now > t0:
            row["steps_per_s"] = (after - s0) / (now - t0)
        self._clock = (now, after)
        return row


def set_sink(sink: Any) -> None:
    global _sink
    _sink = sink


def report(metrics: Mapping[str, Any] | None = None, *, step: int | None = None, epoch: int | None = None,
           kind: str = STEP, checkpoint: bool = False) -> None:
    """Send a metrics row to the driver (into metrics.parquet, the progress line and TensorBoard).

    In a script (train.script), for custom loops that do not use Keras `fit` (whose metrics raytf captures on
    its own): `raytf.report({"loss": loss}, step=step)` after a step, `raytf.report({...}, epoch=e, kind="epoch")`
    after epoch `e` (counted from 1). Without `step`, each step report advances the step count by one. Every
    call is a row (one event to the driver): in a loop of millisecond steps, call it every few dozen steps.
    `checkpoint=True` says a checkpoint was just written under $RAYTF_CHECKPOINT_DIR: the chief's copy is
    then synced to the run's storage (other ranks ignore it).

    In a training function it is `ctx.report(metrics, kind=kind)`; there the context counts steps and
    `ctx.save()` checkpoints. Outside raytf it does nothing.

    Args:
        metrics: {name: number}; tensors and numpy scalars are converted, other values skipped.
        step: global step of this row (script mode).
        epoch: completed epochs (script mode).
        kind: "step" or "epoch".
        checkpoint: sync $RAYTF_CHECKPOINT_DIR to storage now (script mode, chief).
    """
    if kind not in (STEP, EPOCH):
        raise ValueError(f"raytf.report: kind ({kind!r}) must be 'step' or 'epoch'")
    sink = _sink
    if sink is None:
        return
    if isinstance(sink, ScriptReporter):
        sink.report_explicit(metrics, step=step, epoch=epoch, kind=kind, checkpoint=checkpoint)
        return
    if step is not None or epoch is not None or checkpoint:
        raise ValueError("raytf.report: step=, epoch= and checkpoint= are for scripts (train.script); in a "
                         "training function the context counts steps (ctx.step_end) and saves (ctx.save())")
    sink.report(metrics or {}, kind=kind)


def _tree_signature(root: str) -> tuple:
    """What a checkpoint directory holds, cheaply: (path, size, mtime) of every file."""
    sig = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            try:
                st = os.stat(p)
            except FileNotFoundError:  # deleted while we walked (a writer replacing its files)
                continue
            sig.append((os.path.relpath(p, root), st.st_size, st.st_mtime_ns))
    return tuple(sorted(sig))


class ScriptReporter:
    """The child-process side of script mode: counts steps and epochs, sends metrics rows and heartbeats
    as JSON lines on the events pipe, and snapshots the chief's checkpoint directory for upload.

    Has the attributes and methods `_keras.RaytfCallback` uses on a TrainContext, so the same callback
    reports Keras `fit` in both modes."""

    def __init__(self, fd: int, *, every_steps: int, heartbeat_s: float, is_chief: bool, checkpoint_dir: str,
                 scratch: str, epoch: int = 0, step: int = 0) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self.is_chief = is_chief
        self.checkpoint_dir = checkpoint_dir
        self._scratch = scratch
        self._heartbeat_s = heartbeat_s
        self.initial_epoch = self.epoch = epoch  # completed epochs
        self.step = step  # completed global steps
        self.num_replicas = 1
        self.steps_per_epoch: int | None = None
        self._cadence = Cadence(every_steps, step)
        self._last_beat = time.monotonic()
        self._synced = _tree_signature(checkpoint_dir)  # what a resume restored there is not new
        self._snapshots = 0
        self._fits = 0  # Model.fit calls so far in this process
        self._base = (0, 0)  # (epochs, steps) done before the current fit, by earlier fits
        self._fit_begun = False

    def _send(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj) + "\n").encode()
        with self._lock:  # one line at a time (Keras callbacks and user threads may both report)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]

    # -- what _keras.RaytfCallback calls -------------------------------------------------------
    def fit_started(self, *, replicas: int, epochs: int | None, steps_per_epoch: int | None) -> None:
        self._fits += 1
        self._fit_begun = False
        self.num_replicas, self.steps_per_epoch = replicas, steps_per_epoch
        self._send({"kind": "fit", "replicas": replicas, "epochs": epochs, "steps_per_epoch": steps_per_epoch})

    def epoch_begin(self, epoch: int) -> None:
        """Keras' epoch index (0-based, within this fit): after a restore (BackupAndRestore) fit starts past 0."""
        if not self._fit_begun:
            self._fit_begun = True
            # A later fit that starts from epoch 0 (fine-tuning, say) counts on from the earlier ones, so its
            # checkpoints are the newest; one with initial_epoch set (fit one epoch at a time) says where it is.
            self._base = (self.epoch, self.step) if self._fits > 1 and epoch == 0 else (0, 0)
        base_epoch, base_step = self._base
        self.epoch = base_epoch + epoch
        if self.steps_per_epoch:
            self.step = base_step + epoch * self.steps_per_epoch

    def report(self, metrics: Mapping[str, Any] | None, *, kind: str = STEP) -> None:
        self._last_beat = time.monotonic()
        self._send({"kind": kind, "epoch": self.epoch + (1 if kind == STEP else 0), "step": self.step,
                    "metrics": _scalars(metrics)})

    def heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._last_beat >= self._heartbeat_s:
            self._last_beat = now
            self._send({"kind": "heartbeat", "epoch": self.epoch + 1, "step": self.step})

    def step_end(self, metrics: Mapping[str, Any] | None = None, *, steps: int = 1) -> None:
        before, self.step = self.step, self.step + steps
        row = self._cadence.row(metrics, before, self.step)
        if row is None:
            self.heartbeat()
        else:
            self.report(row)

    def epoch_end(self, metrics: Mapping[str, Any] | None = None) -> None:
        self.epoch += 1
        self.report(metrics or {}, kind=EPOCH)
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
            self.report({**_scalars(metrics), **self._steps_per_s(before)}, kind=STEP)
        if checkpoint:
            self.sync()

    def _steps_per_s(self, before: int) -> dict[str, float]:
        row = self._cadence.row(None, before, self.step)
        return {"steps_per_s": row["steps_per_s"]} if row and "steps_per_s" in row else {}

    # -- checkpoints ---------------------------------------------------------------------------
    def sync(self) -> bool:
        """Chief only: if the checkpoint directory changed since the last sync, copy it aside (so the script
        can go on writing) and hand the copy to the host for upload as checkpoint (epoch, step)."""
        if not self.is_chief:
            return False
        sig = _tree_signature(self.checkpoint_dir)
        if not sig or sig == self._synced:
            return False
        self._snapshots += 1
        snap = os.path.join(self._scratch, f"snapshot-{self._snapshots}")
        shutil.copytree(self.checkpoint_dir, snap)
        self._synced = sig
        self._send({"kind": "sync", "path": snap, "epoch": self.epoch, "step": self.step})
        return True

    def exception(self, name: str) -> None:
        """The script ended with an uncaught exception of this type."""
        try:
            self._send({"kind": "exception", "type": name})
        except OSError:  # the host is gone: nobody to tell
            pass

    def close(self, ok: bool) -> None:
        """At exit: a successful script's last writes (model.save after fit, say) are synced too."""
        if ok:
            self.sync()
