"""raytf's live figures as Ray metrics: gauges named raytf_* (ray.util.metrics), recorded in the driver's process,
which Ray's metrics agent on the driver's node serves to Prometheus (as ray_raytf_*) beside Ray's own."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raytf._core import breakdown
from raytf._core import events as ev
from raytf._core import private_apis as apis
from raytf._core.tasks import TaskInfo

log = logging.getLogger("raytf")

RANK_TAGS = ("run", "rank", "role", "host")
RUN_TAGS = ("run",)
# name: (description, tag keys). Prometheus shows them with Ray's prefix: ray_raytf_steps_per_s.
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "raytf_steps_per_s": ("Training steps per second of a rank, over the steps since its previous step row",
                          RANK_TAGS),
    "raytf_examples_per_s": ("The job's examples per second at a rank's pace: steps/s x train.batch_size (per "
                             "replica) x replicas in sync", RANK_TAGS),
    "raytf_step_time_s": ("Wall time of a rank's step, everything included, s", RANK_TAGS),
    "raytf_input_wait_s": ("Time a rank's step waited for its input batch, s", RANK_TAGS),
    "raytf_rss_gib": ("Resident memory of a rank's task process, GiB (failure.max_task_rss_gb watches it)",
                      RANK_TAGS),
    "raytf_gpu_util": ("Utilisation of a task's GPU (device: its index among the task's visible ones), percent",
                       (*RANK_TAGS, "device")),
    "raytf_gpu_mem_gib": ("Memory used on a task's GPU (device: its index among the task's visible ones), GiB",
                          (*RANK_TAGS, "device")),
    "raytf_attempts": ("The run's attempt under way (1: never restarted)", RUN_TAGS),
    "raytf_checkpoint_age_s": ("Seconds since the run's last committed checkpoint", RUN_TAGS),
}
# Step-row columns exported as they are.
FIGURES = {"steps_per_s": "raytf_steps_per_s", breakdown.STEP_TIME: "raytf_step_time_s",
           breakdown.INPUT_WAIT: "raytf_input_wait_s", breakdown.RSS: "raytf_rss_gib"}
_GPU = re.compile(r"^gpu(\d+)_(util|mem_gib)$")
_PER_RANK = frozenset(name for name, (_, keys) in GAUGES.items() if "rank" in keys)

Key = tuple[str, tuple[tuple[str, str], ...]]  # (gauge, sorted tags): one series


def _ray_gauge() -> Callable[..., Any]:
    import ray

    if ray.util.client.ray.is_connected():
        raise RuntimeError("a Ray Client driver (ray://) has no metrics agent of its own to export them through")
    from ray.util.metrics import Gauge

    return Gauge


def _export_interval_s() -> float:
    """How often Ray exports a process's metrics (RAY_metrics_report_interval_ms; never below 1 s). A private
    accessor (raytf/_core/private_apis.py, METRICS_INTERVAL): without it, Ray's default."""
    if not apis.available(apis.METRICS_INTERVAL, log.warning):
        return 10.0
    try:
        return max(1.0, apis.lookup(apis.REPORT_INTERVAL)() / 1000)
    except Exception as e:  # (it moved in another way: the default, said once)
        apis.SWITCHES.turn_off(apis.REPORT_INTERVAL, f"changed ({type(e).__name__}: {e})", log.warning)
        return 10.0


class RayMetrics:
    """A sink fed every event: each rank's last step-row figures, the attempt under way and the checkpoint age,
    as gauges tagged run/rank/role/host.

    Ray 2.60 drops a gauge's series two export intervals (RAY_metrics_report_interval_ms, 10 s) after its last
    `set` (ray/_private/telemetry/open_telemetry_metric_recorder.py, `_resolve_gauge_ttl_seconds`; on the node's
    endpoint a gauge set once was gone within 4 s at 500 ms). So `poll` sets every series again twice per export
    interval (`refresh_s`), and a series no longer set (a rank of an earlier attempt, or every one once the run
    ends) leaves the endpoint. The gauges are made at the first attempt's start (Ray is up then); `gauge` (a Gauge
    class) is for tests. A dashboard must never cost the run: a failure to make or set them is logged once and the
    run goes on without them."""

    def __init__(self, run: str, *, enabled: bool = True, gauge: Callable[..., Any] | None = None,
                 clock: Callable[[], float] = time.time, refresh_s: float = 1.0) -> None:
        self.run = run
        self.enabled = enabled
        self._gauge_class = gauge
        self._clock = clock
        self._gauges: dict[str, Any] | None = None  # None: not made yet; {}: off (disabled, or Ray has none)
        self._values: dict[Key, float] = {}  # every live series' last value, set again at each refresh
        self._who: dict[int, tuple[str, str]] = {}  # rank -> (role, host), this attempt's
        self.batch_size: int | None = None  # per replica; None in script mode (the script's own)
        self.replicas = 0  # in sync, as this attempt's tasks tell it
        self._checkpoint_at: float | None = None
        self.refresh_s = refresh_s  # Ray's gauges: half its export interval, once they are made
        self._refreshed = 0.0

    def _ready(self) -> bool:
        if self._gauges is None:
            self._gauges = self._make() if self.enabled else {}
        return bool(self._gauges)

    def _make(self) -> dict[str, Any]:
        try:
            if self._gauge_class is None:
                gauge, self.refresh_s = _ray_gauge(), _export_interval_s() / 2
            else:
                gauge = self._gauge_class
            return {name: gauge(name, description=text, tag_keys=keys) for name, (text, keys) in GAUGES.items()}
        except Exception as e:  # (no ray[default] metrics pieces, a Ray Client driver, ...)
            log.warning("metrics.ray_metrics: raytf's figures are not exported as Ray metrics (%s); the run goes "
                        "on without them", e)
            return {}

    def _set(self, name: str, tags: Mapping[str, str], value: float, *, keep: bool = True) -> None:
        if not self._gauges:  # (turned off by an earlier failure)
            return
        key = (name, tuple(sorted(tags.items())))
        if keep:
            self._values[key] = float(value)
        try:
            self._gauges[name].set(float(value), tags=dict(key[1]))
        except Exception as e:
            log.warning("metrics.ray_metrics: setting %s failed (%s); raytf's Ray metrics are off for the rest of "
                        "the run", name, e)
            self._gauges, self._values = {}, {}

    def start_attempt(self, number: int, tasks: Iterable[TaskInfo], *, batch_size: int | None) -> None:
        """At each attempt's start, once its tasks are placed: its number, each rank's role and host, and its
        per-replica batch size (None: a script's, not known)."""
        if not self._ready():
            return
        self._who = {t.rank: (t.role, t.host or "") for t in tasks}
        self.batch_size, self.replicas = batch_size, 0
        # The last group's ranks are not training now, and a shrunk group's lost ones never will again: their
        # series are no longer set, and leave the endpoint.
        self._values = {k: v for k, v in self._values.items() if k[0] not in _PER_RANK}
        self._set("raytf_attempts", {"run": self.run}, number)

    def __call__(self, e: ev.Event) -> None:
        if not self._gauges:  # (off, or before the first attempt's start)
            return
        if e.kind == ev.STARTED:
            self.replicas = max(self.replicas, int(e.payload.replicas))
        elif e.kind == ev.CHECKPOINT:
            self._checkpoint_at = e.time
            self._set("raytf_checkpoint_age_s", {"run": self.run}, max(0.0, self._clock() - e.time))
        elif e.kind == ev.STEP:
            self._step(e)

    def _step(self, e: ev.Event) -> None:
        metrics = e.payload.metrics
        role, host = self._who.get(e.rank, (e.role, ""))
        tags = {"run": self.run, "rank": str(e.rank), "role": role, "host": host}
        for column, name in FIGURES.items():
            if column in metrics:
                self._set(name, tags, metrics[column])
        if "steps_per_s" in metrics and self.batch_size and self.replicas:
            self._set("raytf_examples_per_s", tags, metrics["steps_per_s"] * self.batch_size * self.replicas)
        for column, value in metrics.items():
            if m := _GPU.match(column):
                self._set("raytf_gpu_util" if m[2] == "util" else "raytf_gpu_mem_gib", {**tags, "device": m[1]},
                          value)

    def poll(self) -> None:
        """Once per round of the driver's loop: the checkpoint's age, and every series set again (see above)."""
        if not self._gauges:
            return
        now = self._clock()
        if now - self._refreshed < self.refresh_s:
            return
        self._refreshed = now
        if self._checkpoint_at is not None:
            self._values[("raytf_checkpoint_age_s", (("run", self.run),))] = max(0.0, now - self._checkpoint_at)
        for (name, tags), value in list(self._values.items()):
            self._set(name, dict(tags), value, keep=False)
            if not self._gauges:
                return

    def close(self) -> None:
        """The run ended: its series are no longer set, and leave the endpoint."""
        self._values = {}
        self._checkpoint_at = None
