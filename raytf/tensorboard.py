"""TensorBoard event files for every rank's scalars, written by the driver (no TensorFlow needed)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

import pyarrow.fs as pafs

from raytf import events as ev
from raytf.storage import RunDir

log = logging.getLogger("raytf")

TENSORBOARD_DIR = "tensorboard"


class TensorBoardSink:
    """`<run>/tensorboard/<role><rank>/`: step metrics under `step/`, epoch metrics under `epoch/` (at the
    epoch's last step, so resumed attempts continue the same curve), the evaluator's under `eval/`.

    On a local run directory the files are written in place (TensorBoard can watch them live); on an object
    store they are written locally and uploaded when `close()` is called."""

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self.local = isinstance(run_dir.fs, pafs.LocalFileSystem)
        self.root = run_dir.path(TENSORBOARD_DIR) if self.local else tempfile.mkdtemp(prefix="raytf-tb-")
        self.writers: dict[str, object] = {}

    def _writer(self, name: str):
        if name not in self.writers:
            from tensorboardX import SummaryWriter

            self.writers[name] = SummaryWriter(logdir=os.path.join(self.root, name), flush_secs=5)
        return self.writers[name]

    def __call__(self, e: ev.Event) -> None:
        if e.kind not in (ev.STEP, ev.EPOCH, ev.EVAL):
            return
        metrics = e.payload.get("metrics") or {}
        if not metrics:
            return
        w = self._writer(f"{e.role}{e.rank}")
        step = int(e.payload["step"])
        for name, value in metrics.items():
            w.add_scalar(f"{e.kind}/{name}", float(value), global_step=step, walltime=e.time)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
        if not self.local and self.writers:
            try:
                pafs.copy_files(self.root, self.run_dir.path(TENSORBOARD_DIR),
                                source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.run_dir.fs)
            except OSError as e:
                log.warning("TensorBoard files not uploaded to %s: %s", self.run_dir.uri, e)
            shutil.rmtree(self.root, ignore_errors=True)
        self.writers = {}
