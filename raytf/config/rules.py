"""Cross-field rules of the configuration that OmegaConf's types cannot express. Pure: raises ConfigError."""

from __future__ import annotations

import re

from raytf.config.schema import (
    SINGLE_TASK_STRATEGIES,
    Collective,
    Config,
    CrossDeviceOps,
    Partitioner,
    Resources,
    Strategy,
    script_mode,
)
from raytf.errors import ConfigError


def _positive(value: float, key: str, fix: str = "use a number > 0") -> None:
    if value is None or value <= 0:
        raise ConfigError(f"{key} ({value}) must be positive: {fix}")


def _non_negative(value: float, key: str, fix: str) -> None:
    if value is None or value < 0:
        raise ConfigError(f"{key} ({value}) must not be negative: {fix}")


_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def validate(cfg: Config) -> Config:
    """Cross-field rules OmegaConf's types cannot express. Pure; raises ConfigError."""
    c, t = cfg.cluster, cfg.train
    if c.num_workers < 1:
        raise ConfigError(f"cluster.num_workers ({c.num_workers}) must be at least 1")
    _validate_resources(c.worker, "cluster.worker")
    _positive(c.placement_timeout_s, "cluster.placement_timeout_s", "e.g. 60")
    _positive(c.startup_timeout_s, "cluster.startup_timeout_s", "e.g. 120")
    if c.threads is not None and c.threads < 1:
        raise ConfigError(f"cluster.threads ({c.threads}) must be at least 1, or null for the CPU share")
    if c.collective is Collective.nccl and c.worker.gpus <= 0:
        raise ConfigError("cluster.collective (nccl) needs GPUs: set cluster.worker.gpus or use auto/ring")
    _validate_program(cfg)
    _validate_roles(cfg)
    if t.epochs < 1:
        raise ConfigError(f"train.epochs ({t.epochs}) must be at least 1")
    if t.steps_per_epoch is not None and t.steps_per_epoch < 1:
        raise ConfigError(f"train.steps_per_epoch ({t.steps_per_epoch}) must be at least 1, or null")
    if t.batch_size < 1:
        raise ConfigError(f"train.batch_size ({t.batch_size}) must be at least 1 (it is per replica)")
    k = cfg.checkpoint
    _non_negative(k.every_epochs, "checkpoint.every_epochs", "0 turns epoch checkpoints off")
    _non_negative(k.every_steps, "checkpoint.every_steps", "0 turns step checkpoints off")
    _non_negative(k.keep_last, "checkpoint.keep_last", "0 keeps every checkpoint")
    _positive(k.interrupt_timeout_s, "checkpoint.interrupt_timeout_s", "e.g. 60")
    _non_negative(cfg.metrics.every_steps, "metrics.every_steps", "0 reports per epoch only")
    _non_negative(cfg.metrics.flush_interval_s, "metrics.flush_interval_s", "e.g. 5")
    f = cfg.failure
    if f.max_failures < -1:
        raise ConfigError(f"failure.max_failures ({f.max_failures}) must be -1 (no limit) or more")
    _positive(f.hang_timeout_s, "failure.hang_timeout_s", "e.g. 300")
    _positive(f.heartbeat_s, "failure.heartbeat_s", "e.g. 2")
    if f.heartbeat_s >= f.hang_timeout_s:
        raise ConfigError(f"failure.heartbeat_s ({f.heartbeat_s}) must be shorter than failure.hang_timeout_s "
                          f"({f.hang_timeout_s})")
    if f.collective_timeout_s is not None:
        _positive(f.collective_timeout_s, "failure.collective_timeout_s", "or null for none")
    sw = cfg.sweep
    if sw.space:
        if sw.max_concurrent < 1:
            raise ConfigError(f"sweep.max_concurrent ({sw.max_concurrent}) must be at least 1")
        if sw.mode not in ("min", "max"):
            raise ConfigError(f"sweep.mode ({sw.mode!r}) must be min or max")
        if sw.scheduler not in (None, "asha"):
            raise ConfigError(f"sweep.scheduler ({sw.scheduler!r}) must be null or asha")
        if sw.scheduler and not sw.metric:
            raise ConfigError("sweep.scheduler (asha) needs sweep.metric, e.g. val_loss")
    st = cfg.storage
    if st.max_inflight_uploads < 1:
        raise ConfigError(f"storage.max_inflight_uploads ({st.max_inflight_uploads}) must be at least 1")
    if not st.min_upload_mib_s > 0:
        raise ConfigError(f"storage.min_upload_mib_s ({st.min_upload_mib_s}) must be above 0, e.g. 1.0 (MiB/s)")
    _non_negative(st.upload_retries, "storage.upload_retries", "e.g. 5")
    _non_negative(st.upload_backoff_s, "storage.upload_backoff_s", "e.g. 0.5")
    if st.scheme not in (None, "http", "https"):
        raise ConfigError(f"storage.scheme ({st.scheme!r}) must be http, https or null")
    if (st.access_key is None) != (st.secret_key is None):
        raise ConfigError("storage.access_key and storage.secret_key go together: set both, or neither to use "
                          "the environment's credentials")
    if not cfg.storage.path:
        raise ConfigError("storage.path is empty: set a directory or URI, e.g. ./runs or s3://bucket/runs")
    if cfg.run.name is not None and not _RUN_NAME.match(cfg.run.name):
        raise ConfigError(
            f"run.name ({cfg.run.name!r}) must be letters, digits, '.', '_' or '-' (no '/' or spaces)"
        )
    addr = cfg.ray.address
    if addr is not None and addr != "auto" and not addr.startswith("ray://") and ":" not in addr:
        raise ConfigError(f"ray.address ({addr!r}) must be null (embedded), auto, host:port or ray://host:port")
    return cfg


def _validate_program(cfg: Config) -> None:
    """Exactly one of train.entrypoint, train.script and train.module."""
    t = cfg.train
    chosen = [k for k in ("entrypoint", "script", "module") if getattr(t, k)]
    if len(chosen) > 1:
        raise ConfigError(f"train.{chosen[0]} and train.{chosen[1]} are both set: set exactly one of "
                          "train.entrypoint (a function), train.script (a file) or train.module (python -m)")
    if not chosen:
        raise ConfigError("train.entrypoint is empty: set it to package.module:function, e.g. "
                          "examples.keras_cnn:train, or run an existing program with train.script=path/to/train.py")
    if t.entrypoint and not _ENTRYPOINT.match(t.entrypoint):
        raise ConfigError(f"train.entrypoint ({t.entrypoint!r}) must look like package.module:function")
    if t.module and not _MODULE.match(t.module):
        raise ConfigError(f"train.module ({t.module!r}) must be a dotted module name like pkg.train (what "
                          "`python -m` takes); for a file use train.script")
    for i, a in enumerate(t.args or []):
        if not isinstance(a, (str, int, float)):
            raise ConfigError(f"train.args[{i}] ({a!r}) is not a string: YAML read an unquoted {{...}} as a "
                              "mapping. Fix: quote it, e.g. \"{checkpoint_dir}\"")
    if t.args and not (t.script or t.module):
        raise ConfigError("train.args is set but train.script and train.module are not: args are command-line "
                          "arguments of a script; a training function reads train.params")
    if (t.script or t.module) and cfg.cluster.evaluator.enabled:
        raise ConfigError("cluster.evaluator.enabled=true with train.script/train.module: the evaluator runs a "
                          "training function (train.eval_entrypoint). Fix: set cluster.evaluator.enabled=false, "
                          "or evaluate inside the script")


def _validate_roles(cfg: Config) -> None:
    c, t = cfg.cluster, cfg.train
    if c.strategy is Strategy.parameter_server:
        if c.num_ps < 1:
            raise ConfigError(f"cluster.num_ps ({c.num_ps}) must be at least 1 with cluster.strategy="
                              "parameter_server")
        if c.collective is not Collective.auto:
            raise ConfigError(f"cluster.collective ({c.collective.value}) applies to multi_worker_mirrored only: "
                              "leave it auto with parameter_server")
        _validate_resources(c.chief, "cluster.chief")
        _validate_resources(c.ps, "cluster.ps")
        if c.ps.min_shard_bytes < 1:
            raise ConfigError(f"cluster.ps.min_shard_bytes ({c.ps.min_shard_bytes}) must be at least 1")
        if c.ps.max_shards is not None and c.ps.max_shards < 1:
            raise ConfigError(f"cluster.ps.max_shards ({c.ps.max_shards}) must be at least 1, or null for num_ps")
    elif c.num_ps:
        raise ConfigError(f"cluster.num_ps ({c.num_ps}) is for cluster.strategy=parameter_server only: "
                          f"remove it, or switch strategy")
    if c.strategy in SINGLE_TASK_STRATEGIES:
        if c.num_workers != 1:
            raise ConfigError(f"cluster.num_workers ({c.num_workers}) must be 1 with cluster.strategy="
                              f"{c.strategy.value} (one task holding all its GPUs): use multi_worker_mirrored "
                              "for several")
        if c.collective is not Collective.auto:
            raise ConfigError(f"cluster.collective ({c.collective.value}) applies to multi_worker_mirrored only; "
                              "use cluster.cross_device_ops with mirrored")
    if c.cross_device_ops is not CrossDeviceOps.auto:
        if c.strategy is not Strategy.mirrored:
            raise ConfigError(f"cluster.cross_device_ops ({c.cross_device_ops.value}) applies to "
                              "cluster.strategy=mirrored only")
        if c.cross_device_ops is CrossDeviceOps.nccl and c.worker.gpus <= 0:
            raise ConfigError("cluster.cross_device_ops (nccl) needs GPUs: set cluster.worker.gpus, or use "
                              "hierarchical_copy / reduction_to_one")
    if c.strategy is not Strategy.parameter_server and c.ps.variable_partitioner is not Partitioner.none:
            raise ConfigError("cluster.ps.variable_partitioner is for cluster.strategy=parameter_server only")
    if c.evaluator.enabled:
        _validate_resources(c.evaluator, "cluster.evaluator")
        if not t.eval_entrypoint:
            raise ConfigError("cluster.evaluator.enabled is true but train.eval_entrypoint is empty: set it to "
                              "package.module:function, or disable the evaluator")
        if not _ENTRYPOINT.match(t.eval_entrypoint):
            raise ConfigError(f"train.eval_entrypoint ({t.eval_entrypoint!r}) must look like "
                              "package.module:function")
    elif t.eval_entrypoint:
        raise ConfigError(f"train.eval_entrypoint ({t.eval_entrypoint!r}) is set but cluster.evaluator.enabled is "
                          "false: set cluster.evaluator.enabled=true to run it")


def _validate_resources(r: Resources, key: str) -> None:
    _non_negative(r.cpus, f"{key}.cpus", "e.g. 1")
    _non_negative(r.gpus, f"{key}.gpus", "e.g. 0 or 1")
    if r.cpus == 0 and r.gpus == 0 and not r.custom:
        raise ConfigError(f"{key} reserves nothing (cpus=0, gpus=0): reserve at least one CPU or GPU")
    if r.memory_gb is not None:
        _positive(r.memory_gb, f"{key}.memory_gb", "or null for no memory reservation")
    for name, amount in r.custom.items():
        _positive(amount, f"{key}.custom.{name}")


# What a script decides for itself: it builds its own strategy, runs its own loop and writes its own checkpoints.
_SCRIPT_OWNS = ("train.epochs", "train.steps_per_epoch", "train.batch_size", "checkpoint.every_epochs",
                "checkpoint.every_steps", "checkpoint.export_model", "cluster.collective", "cluster.cross_device_ops",
                "cluster.ps.variable_partitioner", "failure.collective_timeout_s")


def ignored_by_scripts(cfg: Config) -> list[str]:
    """The keys set away from their defaults that a script (train.script/train.module) never sees, as
    `key=value`, so the driver can say so instead of leaving them silently without effect. Pure."""
    if not script_mode(cfg):
        return []
    default = Config()
    out = []
    for key in _SCRIPT_OWNS:
        value, base = cfg, default
        for part in key.split("."):
            value, base = getattr(value, part), getattr(base, part)
        if value != base:
            out.append(f"{key}={getattr(value, 'value', value)}")
    return out

