"""Ray Train's words in raytf's (raytf.compat), the pure part: Ray's ScalingConfig, RunConfig, CheckpointConfig and
FailureConfig read as raytf config overrides, with one line for each setting that has no meaning here; and a
worker's local and node ranks from the cluster spec. Duck-typed (attributes read with getattr): no Ray here. Ray
Train v2's classes (ray.train's by default) and v1's (ray.air.config's: ray.train's with RAY_TRAIN_V2_ENABLED=0)
alike: v1's own settings are warned of as v2's unmapped ones are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raytf.errors import ConfigError

GB = 1e9  # Ray's "memory" resource is in bytes; raytf's cluster.worker.memory_gb in GB
# What v2's classes hold for the settings only v1's have (ray.train.v2._internal.constants._DEPRECATED): v2 refuses
# any other value there, so this one is never the program's.
V2_DEPRECATED = "DEPRECATED"


def _not_mapped(what: str, why: str) -> str:
    return f"raytf.compat: {what} is not mapped: {why}"


def _v1_given(value: Any, default: Any) -> bool:
    """Whether a setting only Ray Train v1's config classes have (v2's hold V2_DEPRECATED) is the program's."""
    return value is not None and value != V2_DEPRECATED and value != default


def resources(scaling: Any) -> dict[str, float]:
    """What each worker reserves, as Ray Train 2.60 reads a ScalingConfig (its _resources_per_worker_not_none):
    resources_per_worker without its zeros, else {"CPU": 1} ({"GPU": 1} with use_gpu); use_gpu adds a GPU; an
    accelerator_type adds Ray's `accelerator_type:<type>` resource."""
    given = getattr(scaling, "resources_per_worker", None)
    use_gpu = bool(getattr(scaling, "use_gpu", False))
    if given is None:
        out = {"GPU": 1.0} if use_gpu else {"CPU": 1.0}
    else:
        out = {str(k): float(v) for k, v in given.items() if v != 0}
    if use_gpu:
        out.setdefault("GPU", 1.0)
    accelerator = getattr(scaling, "accelerator_type", None)
    if accelerator:
        out.setdefault(f"accelerator_type:{accelerator}", 0.001)
    return out


def scaling_overrides(scaling: Any) -> tuple[dict[str, Any], list[str]]:
    """ScalingConfig -> cluster.* overrides, and a warning per setting raytf cannot honour."""
    out: dict[str, Any] = {}
    warnings: list[str] = []
    if scaling is None:
        return {"cluster.num_workers": 1}, warnings  # Ray's default ScalingConfig(): one worker, one CPU
    n = getattr(scaling, "num_workers", 1)
    if isinstance(n, (tuple, list)):  # Ray's elastic training: (min, max)
        low, high = int(n[0]), int(n[1])
        out.update({"cluster.num_workers": high, "cluster.min_workers": low,
                    "cluster.elastic.grow_check_s": float(getattr(scaling, "elastic_resize_monitor_interval_s", 60.0)
                                                          or 60.0)})
    else:
        if int(n) < 1:
            raise ConfigError(f"ScalingConfig(num_workers={n}): Ray Train's local mode (the loop in the driver's own "
                              "process) is not mapped: raytf trains in Ray tasks. Fix: num_workers=1 or more")
        out["cluster.num_workers"] = int(n)
    res = resources(scaling)
    out["cluster.worker.cpus"] = res.pop("CPU", 0.0)
    out["cluster.worker.gpus"] = res.pop("GPU", 0.0)
    memory = res.pop("memory", None)
    out["cluster.worker.memory_gb"] = memory / GB if memory else None
    out["cluster.worker.custom"] = res
    out["cluster.placement_strategy"] = str(getattr(scaling, "placement_strategy", "PACK") or "PACK")
    for name, why in (("label_selector", "use custom resources (resources_per_worker) to pin workers to nodes"),
                      ("use_tpu", "raytf trains with TensorFlow's CPU and GPU devices"),
                      ("topology", "a TPU setting")):
        if getattr(scaling, name, None):
            warnings.append(_not_mapped(f"ScalingConfig({name}=...)", f"ignored ({why})"))
    if getattr(scaling, "trainer_resources", None) is not None:  # (v1's: v2 refuses it)
        warnings.append(_not_mapped("ScalingConfig(trainer_resources=...)", "ignored (Ray Train v1's trainer actor's "
                                    "resources: raytf runs none, its driver reserves nothing)"))
    return out, warnings


def run_overrides(run: Any) -> tuple[dict[str, Any], list[str]]:
    """RunConfig (with its CheckpointConfig and FailureConfig) -> run.*, storage.*, checkpoint.*, failure.* and
    ray.runtime_env overrides, and a warning per setting raytf cannot honour."""
    out: dict[str, Any] = {}
    warnings: list[str] = []
    if run is None:
        return out, warnings
    if getattr(run, "name", None):
        out["run.name"] = str(run.name)
    if getattr(run, "storage_path", None):
        out["storage.path"] = str(run.storage_path)
    if getattr(run, "storage_filesystem", None) is not None:
        raise ConfigError("RunConfig(storage_filesystem=...) is not mapped: raytf opens storage by its path or URI "
                          "(s3://bucket/runs, gs://..., a shared path), each node with its own credentials. Fix: "
                          "pass the URI as RunConfig(storage_path=...) and drop storage_filesystem")
    env = getattr(run, "worker_runtime_env", None)
    if env:
        out["ray.runtime_env"] = dict(env)
    checkpoint = getattr(run, "checkpoint_config", None)
    if checkpoint is not None:
        keep = getattr(checkpoint, "num_to_keep", None)
        out["checkpoint.keep_last"] = int(keep) if keep else 0  # Ray's None keeps all; raytf's 0 does
        if getattr(checkpoint, "checkpoint_score_attribute", None):
            warnings.append(_not_mapped(
                "CheckpointConfig(checkpoint_score_attribute=...)",
                f"raytf keeps the newest {keep or 'all'} checkpoints, whatever their score (Result.best_checkpoints "
                "lists them oldest first)"))
        for name, default in (("checkpoint_frequency", 0), ("checkpoint_at_end", None)):  # (v1's)
            if _v1_given(getattr(checkpoint, name, None), default):
                warnings.append(_not_mapped(f"CheckpointConfig({name}=...)", "ignored (the loop reports its own "
                                            "checkpoints, ray.train.report(checkpoint=...); Ray Train v1 refuses it "
                                            "for a loop)"))
    failure = getattr(run, "failure_config", None)
    if failure is not None:
        # Ray Train retries any worker failure, the program's own exceptions too, max_failures times (0 by default).
        limit = int(getattr(failure, "max_failures", 0))
        out["failure.max_failures"] = limit
        out["failure.retry_user_errors"] = limit != 0
        # Preemptions have a budget of their own in both (raytf counts them apart from failures, after every worker
        # saved at one agreed step): -1 is no limit in both.
        preemptions = getattr(failure, "max_preemption_failures", -1)
        if preemptions is not None and int(preemptions) != -1:
            out["failure.max_preemptions"] = int(preemptions)
        for name, default, why in (
                ("controller_failure_limit", -1, "raytf's driver's own errors count against max_failures"),
                ("relax_collectives_on_preemption", False, "every worker saves at one agreed step, then the group "
                                                          "restarts"),
                ("preemption_grace_s", 0.0, "the group saves at once at the notice: no grace window to wait out")):
            if getattr(failure, name, default) != default:
                warnings.append(_not_mapped(f"FailureConfig({name}=...)", f"ignored ({why})"))
        if _v1_given(getattr(failure, "fail_fast", None), False):  # (v1's)
            warnings.append(_not_mapped("FailureConfig(fail_fast=...)", "ignored (max_failures decides: with 0 the "
                                        "first failure ends the run)"))
    if getattr(run, "callbacks", None):
        warnings.append(_not_mapped("RunConfig(callbacks=...)", "ignored (raytf.fit's on_event= sees every report "
                                    "of every rank)"))
    warnings += _v1_run_settings(run)
    level = getattr(getattr(run, "logging_config", None), "log_level", "INFO")
    if str(level).upper() != "INFO":  # (Ray fills in LoggingConfig() when none is given)
        warnings.append(_not_mapped(f"RunConfig(logging_config=LoggingConfig(log_level={level!r}))", "ignored "
                                    "(raytf logs at INFO; each rank's output is in <run>/logs/)"))
    return out, warnings


def _v1_run_settings(run: Any) -> list[str]:
    """A warning per setting of Ray Train v1's RunConfig that v2's lacks (each one Ray's v1 trainer itself says is
    deprecated: ray/train/base_trainer.py's _log_v2_deprecation_warnings), when the program gave it."""
    warnings = []
    # (v1's verbose is filled in by its __post_init__; _verbose keeps the program's)
    for name, default, why in (("stop", None, "Ray Tune's stopping criteria: the loop decides when it ends"),
                               ("_verbose", None, "raytf shows its own progress"),
                               ("progress_reporter", None, "raytf shows its own progress"),
                               ("log_to_file", False, "each rank's output is in <run>/logs/")):
        if _v1_given(getattr(run, name, None), default):
            warnings.append(_not_mapped(f"RunConfig({name.lstrip('_')}=...)", f"ignored ({why})"))
    sync = getattr(run, "sync_config", None)  # (v1 fills in SyncConfig(): only another one is the program's)
    if _v1_given(sync, None) and sync != type(sync)():
        warnings.append(_not_mapped("RunConfig(sync_config=...)", "ignored (raytf uploads each checkpoint to the "
                                    "run's storage itself, beside training)"))
    return warnings


def local_ranks(workers: list[str], index: int) -> tuple[int, int, int]:
    """(local rank, local world size, node rank) of worker `index`, from the cluster spec's worker addresses
    ("host:port", in rank order): the workers of one host are one node, numbered in the order they first appear."""
    hosts = [a.rpartition(":")[0] or a for a in workers]
    mine = hosts[index]
    return hosts[:index].count(mine), hosts.count(mine), list(dict.fromkeys(hosts)).index(mine)


@dataclass(frozen=True)
class StartingFrom:
    """A Ray Train v1 loop given `TensorflowTrainer(resume_from_checkpoint=...)` (v2 refuses it): the loop, and the
    checkpoint its `ray.train.get_checkpoint()` returns while the run has committed none of its own, as under v1.
    A ray.train.Checkpoint: its path and filesystem, read where the task runs (the run's storage, shared)."""

    loop: Callable[..., Any]
    checkpoint: Any

    def __call__(self, *args: Any) -> Any:  # (a task unwraps it: raytf._task.raytrain.loop)
        return self.loop(*args)
