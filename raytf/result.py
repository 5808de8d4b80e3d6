"""The outcome of a run: `result.json` on storage, and the Result object `fit` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from raytf import storage
from raytf.config import Config, load_config
from raytf.errors import TrainingFailedError

SUCCEEDED, FAILED, INTERRUPTED, RUNNING = "succeeded", "failed", "interrupted", "running"


@dataclass
class Result:
    """What a run produced. `metrics` is a pandas DataFrame with one row per reported step or epoch of
    every rank; `metrics_table` is the same as an Arrow table."""

    status: str
    run_dir: str
    config: Config
    summary: dict[str, Any]
    metrics_table: pa.Table
    error: TrainingFailedError | None = None
    checkpoints: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == SUCCEEDED

    @property
    def metrics(self):
        return self.metrics_table.to_pandas()

    @property
    def final_metrics(self) -> dict[str, Any]:
        return dict(self.summary.get("final_metrics") or {})

    @property
    def last_checkpoint(self) -> str | None:
        return self.checkpoints[-1] if self.checkpoints else None

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return list(self.summary.get("tasks") or [])

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return list(self.summary.get("attempts") or [])

    def raise_for_status(self) -> Result:
        if self.error is not None:
            raise self.error
        return self

    def __repr__(self) -> str:
        return (f"Result(status={self.status!r}, run_dir={self.run_dir!r}, "
                f"final_metrics={self.final_metrics!r}, last_checkpoint={self.last_checkpoint!r})")


def load_result(run_dir: str) -> Result:
    """Read a finished (or running) run back from `<storage>/<run name>` (local path or URI)."""
    base, _, query = run_dir.partition("?")  # S3 options may ride in the query: s3://b/runs/x?scheme=http
    parent, _, name = base.rstrip("/").rpartition("/")
    rd = storage.RunDir((parent or ".") + (f"?{query}" if query else ""), name)
    summary = rd.read_json(storage.RESULT_FILE)
    cfg = load_config(_yaml_dict(rd.read_text(storage.CONFIG_FILE)))
    table = rd.read_table(storage.METRICS_FILE) if rd.exists(storage.METRICS_FILE) else pa.table({})
    ckpts = [rd.uri_of(storage.CHECKPOINTS_DIR, e.name) for e in rd.list_checkpoints() if e.committed]
    return Result(status=summary.get("status", RUNNING), run_dir=rd.uri, config=cfg, summary=summary,
                  metrics_table=table, checkpoints=ckpts)


def _yaml_dict(text: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.create(text))
