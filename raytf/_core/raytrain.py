"""Ray Train's words in raytf's (raytf.compat), the pure part: Ray's ScalingConfig, RunConfig, CheckpointConfig and
FailureConfig read as raytf config overrides, with one line for each setting that has no meaning here; and a
worker's local and node ranks from the cluster spec. Duck-typed (attributes read with getattr): no Ray here."""

from __future__ import annotations

from typing import Any

from raytf.errors import ConfigError

GB = 1e9  # Ray's "memory" resource is in bytes; raytf's cluster.worker.memory_gb in GB


def _not_mapped(what: str, why: str) -> str:
    return f"raytf.compat: {what} is not mapped: {why}"


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
    if getattr(run, "callbacks", None):
        warnings.append(_not_mapped("RunConfig(callbacks=...)", "ignored (raytf.fit's on_event= sees every report "
                                    "of every rank)"))
    level = getattr(getattr(run, "logging_config", None), "log_level", "INFO")
    if str(level).upper() != "INFO":  # (Ray fills in LoggingConfig() when none is given)
        warnings.append(_not_mapped(f"RunConfig(logging_config=LoggingConfig(log_level={level!r}))", "ignored "
                                    "(raytf logs at INFO; each rank's output is in <run>/logs/)"))
    return out, warnings


def local_ranks(workers: list[str], index: int) -> tuple[int, int, int]:
    """(local rank, local world size, node rank) of worker `index`, from the cluster spec's worker addresses
    ("host:port", in rank order): the workers of one host are one node, numbered in the order they first appear."""
    hosts = [a.rpartition(":")[0] or a for a in workers]
    mine = hosts[index]
    return hosts[:index].count(mine), hosts.count(mine), list(dict.fromkeys(hosts)).index(mine)
