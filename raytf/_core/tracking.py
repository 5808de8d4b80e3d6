"""What a run sends to an experiment tracker (MLflow), pure: the config as flat params, metric names and points
(epoch rows averaged over ranks as on the learning curves, step rows at the rate reported, the step-time breakdown
per rank) and tags. How it is sent (batches, back-off) is `_core.tracking_outbox`'s; `_driver.tracking` sends. No
MLflow, no I/O."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from raytf._core import events as ev
from raytf._core.attempt_record import FAILED, INTERRUPTED, RUNNING, SUCCEEDED
from raytf._core.breakdown import is_timing

DEFAULT_EXPERIMENT = "raytf"

# MLflow's own limits (mlflow/utils/validation.py): a param's value, a tag's value.
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
# An epoch's average is logged when every rank that trains has reported the epoch, or this long after its first
# row (a program that reports epochs on some ranks only), or at the attempt's end.
EPOCH_GRACE_S = 30.0

# The run's tags (MLflow's own `mlflow.runName` and `mlflow.parentRunId` aside).
TAG_VERSION = "raytf.version"
TAG_STRATEGY = "raytf.strategy"
TAG_RUN_NAME = "raytf.run_name"
TAG_RUN_DIR = "raytf.run_dir"
TAG_RUN_KEY = "raytf.run_key"  # a hash of the run directory's URI: what a relaunch finds its MLflow run by
TAG_STATUS = "raytf.status"
TAG_SWEEP = "raytf.sweep"
TAG_SWEEP_KEY = "raytf.sweep_key"
TAG_CHANGED = "raytf.changed_params"  # a relaunch's params whose value differs from the first launch's
PARENT_RUN_ID = "mlflow.parentRunId"  # MLflow's: a sweep's trials are child runs of the sweep's run

STEP_PREFIX = "step/"  # step rows' model metrics (rank 0's), step = the global step


def rank_prefix(rank: int) -> str:
    """The step-time breakdown and throughput per rank: `rank1/step_time_s`, step = the global step."""
    return f"rank{rank}/"


def mlflow_status(status: str) -> str:
    """raytf's run status as MLflow's RunStatus name."""
    return {SUCCEEDED: "FINISHED", FAILED: "FAILED", INTERRUPTED: "KILLED", RUNNING: "RUNNING"}.get(status, "FAILED")


def experiment_name(configured: str | None) -> str:
    return configured.strip() if configured and configured.strip() else DEFAULT_EXPERIMENT


def run_key(run_dir_uri: str) -> str:
    """What a relaunch finds its MLflow run by: the run directory's URI hashed (a tag value any filter can quote)."""
    return hashlib.sha256(run_dir_uri.encode()).hexdigest()[:32]


def sweep_key(experiment: str, name: str) -> str:
    return hashlib.sha256(f"{experiment}\0{name}".encode()).hexdigest()[:32]


def absolute_sqlite(uri: str, cwd: str) -> str:
    """A `sqlite:///relative.db` URI made absolute against `cwd` (a sweep's trials run in other working
    directories); any other URI as it is."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix) or uri.startswith(prefix + "/"):
        return uri
    return f"{prefix}{cwd.rstrip('/')}/{uri[len(prefix):]}"


def local_artifact_root(uri: str) -> str | None:
    """Where a new experiment's artefacts go when the store is a local SQLite file (no server to hold them):
    `mlartifacts/` beside the database, not MLflow's `./mlruns` under whatever directory the driver runs in (a
    sweep trial's is temporary). None: the store's own default (a server's)."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return None
    path = uri[len(prefix):].partition("?")[0]
    return f"{path.rpartition('/')[0] or '.'}/mlartifacts"


# -- params ---------------------------------------------------------------------------------------------------------

def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= MAX_PARAM_VALUE else text[:MAX_PARAM_VALUE - 3] + "..."


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A config (as `to_dict` gives it, already redacted) as MLflow params: one per leaf, dotted keys
    (`cluster.num_workers`, `train.params.learning_rate`), lists as JSON, an empty mapping as `{}`."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[metric_key(name)] = _value(value)
    return out


def changed_params(logged: Mapping[str, str], wanted: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A relaunch's params against those its MLflow run already has (MLflow refuses to change a param's value):
    (the params still to log, {key: "old -> new"} for those whose value changed, which stay as they were)."""
    new = {k: v for k, v in wanted.items() if k not in logged}
    changed = {k: f"{logged[k]} -> {v}" for k, v in wanted.items() if k in logged and logged[k] != v}
    return new, changed


def changed_tag(changed: Mapping[str, str]) -> str:
    return clip("; ".join(f"{k}: {v}" for k, v in sorted(changed.items())), MAX_TAG_VALUE)


def clip(text: str, limit: int = MAX_TAG_VALUE) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


# -- metrics --------------------------------------------------------------------------------------------------------

# MLflow's metric, param and tag names (mlflow/utils/validation.py): letters, digits, `_ - . / :` and spaces, a
# normalised path (no `//`, `./`, `..`, leading or trailing `/`), at most 250 characters.
_BAD_NAME = re.compile(r"[^\w\-./: ]")
MAX_KEY = 250


def metric_key(name: str) -> str:
    """A name MLflow takes for a metric, param or tag (others are refused, with the rest of their batch)."""
    parts = [p for p in _BAD_NAME.sub("_", str(name)).split("/") if p not in ("", ".", "..")]
    key = "/".join(re.sub(r"\.\.+", ".", p) for p in parts) or "_"
    return key[:MAX_KEY]


class Point(NamedTuple):
    """One metric value: MLflow's Metric(key, value, timestamp in ms, step)."""

    key: str
    value: float
    timestamp_ms: int
    step: int


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out


@dataclass
class _Epoch:
    first_at: float
    rows: dict[int, dict[str, float]] = field(default_factory=dict)  # rank -> its model metrics
    time: float = 0.0


class MetricStream:
    """The tasks' events as metric points:

    - epoch rows: each model metric averaged over the ranks that report it, step = the epoch (the learning curves'
      numbers, `figures.learning_curves`); an epoch is logged once every rank that trains this attempt has reported
      it (`EPOCH_GRACE_S` at most after its first row; at the attempt's end whatever came). An epoch trained again
      (a retry resumed before it) is logged again at the same step: the curve's last value there is the one the
      final model descends from, as on the learning curves.
    - the evaluator's rows: `eval_<name>`, step = the epoch of the checkpoint it scored.
    - step rows: rank 0's model metrics as `step/<name>`, every rank's timing (the step-time breakdown, steps/s, GPU
      use) as `rank<N>/<name>`, step = the global step, at the rate they were reported.
    """

    def __init__(self, grace_s: float = EPOCH_GRACE_S) -> None:
        self.grace_s = grace_s
        self.attempt: int | None = None
        self.trainers: set[int] = set()  # ranks that train in this attempt (they send steps, epochs, heartbeats)
        self.pending: dict[tuple[int | None, int], _Epoch] = {}  # (fit, epoch) -> its rows so far

    def add(self, events: Iterable[ev.Event], now: float) -> list[Point]:
        out: list[Point] = []
        for e in events:
            if e.kind not in (ev.STEP, ev.EPOCH, ev.EVAL, ev.HEARTBEAT):
                continue
            if self.attempt is None or e.attempt > self.attempt:
                out += self.flush()
                self.attempt, self.trainers = e.attempt, set()
            elif e.attempt < self.attempt:
                continue  # (a late event of an attempt already ended)
            if e.kind == ev.EVAL:
                out += self._eval(e)
                continue
            self.trainers.add(e.rank)
            if e.kind == ev.STEP:
                out += self._step(e)
            elif e.kind == ev.EPOCH:
                self._epoch(e)
        return out + self.due(now)

    @staticmethod
    def _metrics(e: ev.Event, *, timing: bool) -> dict[str, float]:
        out = {}
        for name, value in e.payload.metrics.items():
            number = _number(value)
            if number is not None and is_timing(name) == timing:
                out[name] = number
        return out

    def _step(self, e: ev.Event) -> list[Point]:
        at, step = int(e.time * 1000), int(e.payload.step)
        out = [Point(metric_key(rank_prefix(e.rank) + k), v, at, step)
               for k, v in self._metrics(e, timing=True).items()]
        if e.rank == 0:
            out += [Point(metric_key(STEP_PREFIX + k), v, at, step) for k, v in self._metrics(e, timing=False).items()]
        return out

    def _eval(self, e: ev.Event) -> list[Point]:
        at, epoch = int(e.time * 1000), int(e.payload.epoch)
        return [Point(metric_key(f"eval_{k}"), v, at, epoch) for k, v in self._metrics(e, timing=False).items()]

    def _epoch(self, e: ev.Event) -> None:
        key = (e.payload.fit, int(e.payload.epoch))
        pending = self.pending.setdefault(key, _Epoch(first_at=e.time))
        pending.rows[e.rank] = self._metrics(e, timing=False)
        pending.time = max(pending.time, e.time)

    def due(self, now: float) -> list[Point]:
        """The epochs every trainer reported, or whose grace is over."""
        ready = [k for k, p in self.pending.items()
                 if set(p.rows) >= self.trainers or now - p.first_at >= self.grace_s]
        return self._emit(ready)

    def flush(self) -> list[Point]:
        """Every epoch still pending (the attempt ended: no more rows will come for it)."""
        return self._emit(list(self.pending))

    def _emit(self, keys: list[tuple[int | None, int]]) -> list[Point]:
        out: list[Point] = []
        for key in sorted(keys, key=lambda k: (k[0] or 0, k[1])):
            pending = self.pending.pop(key)
            names = sorted({n for row in pending.rows.values() for n in row})
            for name in names:
                values = [row[name] for row in pending.rows.values() if name in row]
                out.append(Point(metric_key(name), sum(values) / len(values), int(pending.time * 1000), key[1]))
        return out


# -- tags -----------------------------------------------------------------------------------------------------------

def attempt_tags(attempt: Mapping[str, Any]) -> dict[str, str]:
    """An attempt's end as tags: `raytf.attempt.2.status`, `.cause`, `.decision` (retry/raise), `.reason`."""
    n = attempt.get("attempt")
    out = {}
    for key in ("status", "cause", "decision", "reason", "error_type", "role", "rank", "resumed_from", "resize"):
        value = attempt.get(key)
        if value is not None and value != "":
            out[f"raytf.attempt.{n}.{key}"] = clip(str(value))
    return out
