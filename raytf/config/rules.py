"""What OmegaConf's types cannot express: every numeric key's range (config/ranges.py), the cross-field rules,
and a sweep space that would run no trial. Pure: raises ConfigError."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from raytf.config.choices import (
    SINGLE_TASK_STRATEGIES,
    Collective,
    CrossDeviceOps,
    Partitioner,
    PlacementStrategy,
    Strategy,
)
from raytf.config.cluster import (
    Resources,
)
from raytf.config.ranges import RANGES as RANGES  # (re-exported: the tests' table of every numeric key)
from raytf.config.ranges import Range, check_range, check_ranges
from raytf.config.ranges import number_wanted as number_wanted  # (re-exported: load.py's)
from raytf.config.redact import redact_text, storage_path_problem
from raytf.config.schema import Config, script_mode
from raytf.errors import ConfigError

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# What train.entrypoint records of a function sent by value (raytf.fit(train_fn=...); raytf._core.function).
_FUNCTION_LABEL = re.compile(r"^<function \S.* defined in \S+>$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# A run's name is a directory's, and part of its temporary files' and scratch's names (a filesystem's limit for one
# name is 255 bytes: a 300-character name retried ENAMETOOLONG for 16 s before, raytf issue 71).
RUN_NAME_MAX = 128


def is_function_label(entrypoint: str | None) -> bool:
    """Whether an entrypoint records a function a program gave raytf.fit by value (not importable by name)."""
    return bool(entrypoint) and bool(_FUNCTION_LABEL.match(entrypoint))


def _function(value: str | None) -> bool:
    """An entrypoint's form: package.module:function, or the label of a function sent by value."""
    return bool(value) and (bool(_ENTRYPOINT.match(value)) or is_function_label(value))


def validate(cfg: Config) -> Config:
    """Every numeric key's range (RANGES) and the cross-field rules OmegaConf's types cannot express. Pure;
    raises ConfigError."""
    c = cfg.cluster
    check_ranges(cfg)
    _validate_resources(c.worker, "cluster.worker")
    if c.collective is Collective.nccl and c.worker.gpus <= 0:
        raise ConfigError("cluster.collective (nccl) needs GPUs: set cluster.worker.gpus or use auto/ring")
    _validate_program(cfg)
    _validate_roles(cfg)
    if c.min_workers is not None and c.min_workers > c.num_workers:
        raise ConfigError(f"cluster.min_workers ({c.min_workers}) must be at most cluster.num_workers "
                          f"({c.num_workers}): it is the fewest workers to train with, num_workers the size wanted")
    _validate_port_range(cfg)
    _validate_data_service(cfg)
    f = cfg.failure
    if f.heartbeat_s >= f.hang_timeout_s:
        raise ConfigError(f"failure.heartbeat_s ({f.heartbeat_s}) must be shorter than failure.hang_timeout_s "
                          f"({f.hang_timeout_s})")
    sw = cfg.sweep
    if sw.space:
        check_space(sw.space)
        if sw.mode not in ("min", "max"):
            raise ConfigError(f"sweep.mode ({sw.mode!r}) must be min or max")
        if sw.scheduler not in (None, "asha"):
            raise ConfigError(f"sweep.scheduler ({sw.scheduler!r}) must be null or asha")
        if sw.scheduler and not sw.metric:
            raise ConfigError("sweep.scheduler (asha) needs sweep.metric, e.g. val_loss")
    st = cfg.storage
    if st.scheme not in (None, "http", "https"):
        raise ConfigError(f"storage.scheme ({st.scheme!r}) must be http, https or null")
    if (st.access_key is None) != (st.secret_key is None):
        raise ConfigError("storage.access_key and storage.secret_key go together: set both, or neither to use "
                          "the environment's credentials")
    if not cfg.storage.path:
        raise ConfigError("storage.path is empty: set a directory or URI, e.g. ./runs or s3://bucket/runs")
    if (problem := storage_path_problem(cfg.storage.path)) is not None:
        raise ConfigError(problem)  # (never the path: it holds a secret)
    if cfg.run.name is not None and not _RUN_NAME.fullmatch(cfg.run.name):  # (fullmatch: `$` admits a last \n)
        raise ConfigError(
            f"run.name ({cfg.run.name!r}) must be letters, digits, '.', '_' or '-' (no '/' or spaces)"
        )
    if cfg.run.name is not None and len(cfg.run.name) > RUN_NAME_MAX:  # (a path component: at most 255 bytes)
        raise ConfigError(f"run.name ({cfg.run.name[:40]!r}..., {len(cfg.run.name)} characters) is longer than "
                          f"{RUN_NAME_MAX}: the run directory's name (and its temporary names) must fit a path; "
                          "choose a shorter name")
    _validate_tracking(cfg)
    addr = cfg.ray.address
    if addr is not None and addr != "auto" and not addr.startswith("ray://") and ":" not in addr:
        raise ConfigError(f"ray.address ({addr!r}) must be null (embedded), auto, host:port or ray://host:port")
    return cfg


def validate_run(cfg: Config) -> Config:
    """What a run (raytf.fit, raytf.sweep, python -m raytf.launch) refuses on top of `validate`, before Ray
    starts: storage keys in its config, which is sent to every task (reading runs in this process may use them).
    Pure; raises ConfigError without the keys' values."""
    st = cfg.storage
    if st.access_key is not None or st.secret_key is not None:
        raise ConfigError("storage.access_key/storage.secret_key are set (values not shown): a run's config is sent "
                          "to every task, so the keys would travel with it. Fix: remove them and put them in a "
                          "credentials file on every node (storage.credentials_file=/path/on/each/node, an "
                          "AWS-style [default] file) or in the nodes' environment (AWS_ACCESS_KEY_ID, "
                          "AWS_SECRET_ACCESS_KEY)")
    return cfg


# Why Ray Data input is refused with ParameterServerStrategy (also for raytf.fit(datasets=...)).
PS_DATASETS = (
    "train.datasets / datasets=: Ray Data input works with multi_worker_mirrored and the single-task strategies, "
    "not parameter_server: its workers run the coordinator's per-worker tf.data graphs on remote TF servers, and "
    "Ray Data reaches TensorFlow through Dataset.from_generator, which runs only in the process that made it. "
    "Fix: cluster.strategy=multi_worker_mirrored, or read the data with tf.data inside the per-worker dataset "
    "function")


# What MLflow takes as a tracking URI without a scheme: Databricks' workspaces (its other URIs have one).
_MLFLOW_NAMED_URIS = ("databricks", "databricks-uc", "uc")


def _validate_tracking(cfg: Config) -> None:
    """tracking.mlflow: a URI MLflow 3 accepts (not its file store), an experiment name that is not blank."""
    m = cfg.tracking.mlflow
    uri = m.uri.strip()
    if uri and uri not in _MLFLOW_NAMED_URIS and ("://" not in uri or uri.startswith("file:")):
        raise ConfigError(
            f"tracking.mlflow.uri ({redact_text(uri)!r}) is a directory: MLflow's file store, which MLflow 3 refuses "
            "(MLFLOW_ALLOW_FILE_STORE). Fix: a database, e.g. sqlite:////absolute/path/mlflow.db, or a tracking "
            "server, e.g. http://mlflow.example:5000")
    if uri.startswith("sqlite:") and not uri.startswith("sqlite:///"):
        raise ConfigError(f"tracking.mlflow.uri ({uri!r}) must name a file: sqlite:///relative/mlflow.db or "
                          "sqlite:////absolute/path/mlflow.db")
    if m.experiment is not None and not m.experiment.strip():
        raise ConfigError("tracking.mlflow.experiment is blank: name the MLflow experiment, or leave it out (null) "
                          "for the config file's name")


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
    if t.entrypoint and not _function(t.entrypoint):
        raise ConfigError(f"train.entrypoint ({t.entrypoint!r}) must look like package.module:function")
    if t.ray_train and not t.entrypoint:
        raise ConfigError("train.ray_train=true is for a training function (a Ray Train train_loop_per_worker, "
                          "train.entrypoint), not train.script/train.module")
    if t.ray_train and cfg.cluster.strategy is not Strategy.multi_worker_mirrored:
        raise ConfigError(f"train.ray_train=true with cluster.strategy={cfg.cluster.strategy.value}: a Ray Train "
                          "loop builds its own MultiWorkerMirroredStrategy from TF_CONFIG, as under Ray Train's "
                          "TensorflowTrainer. Fix: cluster.strategy=multi_worker_mirrored")
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
    if t.datasets and not _ENTRYPOINT.match(t.datasets):
        raise ConfigError(f"train.datasets ({t.datasets!r}) must look like package.module:function (a function "
                          "returning {name: ray.data.Dataset})")
    if t.datasets and cfg.cluster.strategy is Strategy.parameter_server:
        raise ConfigError(PS_DATASETS)
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
        if not _function(t.eval_entrypoint):
            raise ConfigError(f"train.eval_entrypoint ({t.eval_entrypoint!r}) must look like "
                              "package.module:function")
    elif t.eval_entrypoint:
        raise ConfigError(f"train.eval_entrypoint ({t.eval_entrypoint!r}) is set but cluster.evaluator.enabled is "
                          "false: set cluster.evaluator.enabled=true to run it")


def _validate_port_range(cfg: Config) -> None:
    """cluster.port_range: [low, high] of unprivileged ports, with a port for every task that may share a host."""
    c = cfg.cluster
    r = c.port_range
    if r is None:
        return
    if not (isinstance(r, (list, tuple)) and len(r) == 2
            and all(isinstance(p, int) and not isinstance(p, bool) for p in r) and 1024 <= r[0] <= r[1] <= 65535):
        raise ConfigError(f"cluster.port_range ({r!r}) must be [low, high]: two integers, 1024 <= low <= high <= "
                          "65535 (e.g. [20000, 20099]), or null for any free port")
    low, high = r
    ps = c.strategy is Strategy.parameter_server
    tasks = c.num_workers + (1 + c.num_ps if ps else 0) + (1 if c.evaluator.enabled else 0)
    # Every task may land on one host, except with STRICT_SPREAD (one task per host).
    needed = 1 if c.placement_strategy is PlacementStrategy.STRICT_SPREAD else tasks
    # The tf.data service's servers (its dispatcher and workers) take their ports from the range too, and may all
    # land on any one host.
    servers = cfg.data_service.workers + 1 if cfg.data_service.workers else 0
    needed += servers
    if high - low + 1 < needed:
        what = f"the run's {tasks} tasks" + (f" and {servers} tf.data service servers" if servers else "")
        raise ConfigError(f"cluster.port_range ({list(r)}) holds {high - low + 1} port(s), but {what} may all land "
                          f"on one host (cluster.placement_strategy={c.placement_strategy.value}): widen it to at "
                          f"least {needed} ports, e.g. [{min(low, 65536 - needed)}, "
                          f"{min(low, 65536 - needed) + needed - 1}]")


def _validate_data_service(cfg: Config) -> None:
    """data_service.*: what each service worker reserves (its counts are in RANGES)."""
    d = cfg.data_service
    for name, amount in d.resources.items():
        check_range(amount, f"data_service.resources.{name}", Range(0, "above 0, e.g. 1", above=True))
    if d.workers and d.cpus == 0 and not d.resources:
        raise ConfigError(f"data_service.workers ({d.workers}) reserve nothing (data_service.cpus=0, no "
                          "data_service.resources): reserve at least one CPU per service worker, e.g. "
                          "data_service.cpus=1")


def _validate_resources(r: Resources, key: str) -> None:
    """A role's reservation (its cpus, gpus and memory_gb are in RANGES)."""
    if r.cpus == 0 and r.gpus == 0 and not r.custom:
        raise ConfigError(f"{key} reserves nothing (cpus=0, gpus=0): reserve at least one CPU or GPU")
    for name, amount in r.custom.items():
        check_range(amount, f"{key}.custom.{name}", Range(0, "above 0, e.g. 1", above=True))


def check_space(space: Mapping[str, Any], name: str = "sweep.space",
                is_domain: Callable[[Any], bool] | None = None) -> None:
    """A sweep's space: dotted keys to non-empty lists (a grid axis; `{grid_search: [...]}` too) or, from Python,
    Ray Tune domains (`is_domain`). An empty space or axis would run no trial. Pure; raises ConfigError."""
    if not space:
        raise ConfigError(f"{name} is empty: map dotted config keys to lists of values, e.g. "
                          "{'train.params.learning_rate': [0.01, 0.001]}")
    for key, values in space.items():
        if is_domain is not None and is_domain(values):
            continue
        axis = values["grid_search"] if isinstance(values, Mapping) and "grid_search" in values else values
        if not isinstance(axis, (list, tuple)):
            domain = " or a Ray Tune domain (tune.uniform, tune.choice, ...)" if is_domain else ""
            raise ConfigError(f"{name} {key!r} ({values!r}) must be a list of values{domain}, e.g. [1, 2]")
        if not axis:
            raise ConfigError(f"{name} {key!r} ({values!r}) has no values, so the sweep would run no trial: "
                              "give at least one, e.g. [1, 2]")


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

