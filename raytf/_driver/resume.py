"""What a launch finds in its run directory, and where each attempt resumes from: earlier launches' record and
metrics, a second lineage of checkpoints refused, and the checkpoint to resume from, verified against its manifest
(each refused one named once). Imports Ray, never TensorFlow (as every _driver module)."""

from __future__ import annotations

import logging
from typing import Any

from raytf import _storage as storage
from raytf._core.checkpoints import CheckpointEntry
from raytf.config import Config
from raytf.errors import ConfigError

log = logging.getLogger("raytf")


class Resume:
    """The checkpoints of one launch's run directory, as its attempts resume from them."""

    def __init__(self, cfg: Config, run_dir: storage.RunDir) -> None:
        self.cfg, self.run_dir = cfg, run_dir
        self._verified: set[str] = set()  # checkpoints whose files this launch checked against their manifest
        self._refused: set[str] = set()  # and those that did not match (named once)

    def earlier(self) -> tuple[dict[str, Any], Any, CheckpointEntry | None]:
        """The run directory made; earlier launches' result.json ({} for none); with checkpoint.resume, their
        metrics and the checkpoint to resume from. A second lineage of checkpoints is refused."""
        cfg, rd = self.cfg, self.run_dir
        rd.makedirs()
        previous = rd.read_json(storage.RESULT_FILE) if rd.exists(storage.RESULT_FILE) else {}
        if cfg.checkpoint.resume:
            entry = self.trusted()
            return previous, rd.metrics.read() if rd.metrics.exists() else None, entry
        if rd.exists(storage.CHECKPOINTS_DIR) and (old := rd.checkpoints.list()):
            # One lineage per run directory: a second one there would be pruned by (epoch, step) against the
            # first, resumed from the first's newest on a retry and reported as the first's last checkpoint.
            raise ConfigError(
                f"checkpoint.resume=false: run.name={cfg.run.name!r} already has {len(old)} checkpoint(s) in "
                f"{rd.uri_of(storage.CHECKPOINTS_DIR)}. Fix: a new run.name for a fresh start, "
                "checkpoint.resume=true to continue it, or delete that directory")
        if rd.metrics.exists():
            # A launch that does not resume starts the run's table afresh: the rows there are an earlier launch's
            # that no checkpoint continues (its first whole write would drop them anyway), and the driver's table
            # reads its stored rows back from there (RunRecord's MetricsTable).
            rd.metrics.clear()
        return previous, None, None

    def trusted(self) -> CheckpointEntry | None:
        """The checkpoint to resume from: the newest committed one whose files match its manifest. Each one
        refused is named once, on one line; refusing the only ones there are ends the run (starting over would
        silently throw away their training)."""
        checkpoints = self.run_dir.checkpoints
        entry, refused = checkpoints.trusted(self._verified)
        for bad, why in refused:
            if bad.dir in self._refused:
                continue
            self._refused.add(bad.dir)
            instead = f"resuming from {entry.name} instead" if entry else "no earlier committed checkpoint to use"
            log.warning("checkpoint %s refused: %s; %s", checkpoints.uri(bad.dir), why, instead)
        if entry is None and refused:
            bad, why = refused[0]
            raise ConfigError(
                f"checkpoint {checkpoints.uri(bad.dir)} refused: {why}. No earlier committed checkpoint matches its "
                "manifest. Fix: restore its files, or delete it (or the run's checkpoints/) to train from scratch, or "
                "use a new run.name")
        return entry
