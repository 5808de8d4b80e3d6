"""The typed run configuration: one dataclass schema, YAML and `key=value` overrides merged onto it."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from raytf.errors import ConfigError


# Enum *names* are what users type in YAML; OmegaConf matches on the name.
class Strategy(str, enum.Enum):
    multi_worker_mirrored = "multi_worker_mirrored"
    parameter_server = "parameter_server"
    # One task holding all its GPUs (the CPU on a machine without any).
    mirrored = "mirrored"
    central_storage = "central_storage"


SINGLE_TASK_STRATEGIES = (Strategy.mirrored, Strategy.central_storage)


class PlacementStrategy(str, enum.Enum):
    PACK = "PACK"
    SPREAD = "SPREAD"
    STRICT_PACK = "STRICT_PACK"
    STRICT_SPREAD = "STRICT_SPREAD"


class Collective(str, enum.Enum):
    auto = "auto"
    ring = "ring"
    nccl = "nccl"


@dataclass
class RayConfig:
    # None starts an embedded local Ray; "auto" or "ray://host:port" joins a running cluster.
    address: str | None = None
    runtime_env: dict[str, Any] = field(default_factory=dict)
    # Embedded Ray only: CPUs to offer (None = all of this machine's).
    num_cpus: int | None = None
    # The dashboard costs ~2 s of start-up; ray.util.state needs it.
    include_dashboard: bool = False
    log_to_driver: bool = True


@dataclass
class Resources:
    cpus: float = 1.0
    gpus: float = 0.0
    memory_gb: float | None = None
    custom: dict[str, float] = field(default_factory=dict)


class CrossDeviceOps(str, enum.Enum):
    auto = "auto"
    nccl = "nccl"
    hierarchical_copy = "hierarchical_copy"
    reduction_to_one = "reduction_to_one"


class Partitioner(str, enum.Enum):
    none = "none"
    min_size_max_shards = "min_size_max_shards"


@dataclass
class PsConfig(Resources):
    """A parameter server's reservation, and how variables are split across the servers."""

    variable_partitioner: Partitioner = Partitioner.none
    # min_size_max_shards: shards of at least this many bytes, at most max_shards (null = num_ps).
    min_shard_bytes: int = 256 * 1024
    max_shards: int | None = None


@dataclass
class EvaluatorConfig(Resources):
    """The optional side-car evaluator: runs train.eval_entrypoint on each new checkpoint."""

    enabled: bool = False
    # Grace period for the evaluator to finish the last checkpoint once training is done.
    finish_timeout_s: float = 300.0


@dataclass
class ClusterConfig:
    strategy: Strategy = Strategy.multi_worker_mirrored
    num_workers: int = 2
    worker: Resources = field(default_factory=Resources)
    # parameter_server only: the coordinator task and the parameter servers.
    chief: Resources = field(default_factory=Resources)
    num_ps: int = 0
    ps: PsConfig = field(default_factory=PsConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    placement_strategy: PlacementStrategy = PlacementStrategy.PACK
    placement_timeout_s: float = 60.0
    # Deadline for every task to start and report its address, and for the strategy's start-up barrier.
    startup_timeout_s: float = 120.0
    collective: Collective = Collective.auto
    # mirrored only: how the task's GPUs all-reduce.
    cross_device_ops: CrossDeviceOps = CrossDeviceOps.auto
    # Let TF grow GPU memory as needed instead of taking it all at start-up.
    gpu_memory_growth: bool = True
    # Address advertised in the cluster spec; None = the node's address as Ray reports it
    # (127.0.0.1 when raytf starts an embedded single-machine Ray).
    advertise_address: str | None = None
    # TF intra/inter-op threads per task; None = the task's CPU reservation (at least 1).
    threads: int | None = None


@dataclass
class TrainConfig:
    # The user's training function, as "package.module:function".
    entrypoint: str = ""
    # The evaluator's function (cluster.evaluator.enabled), as "package.module:function".
    eval_entrypoint: str = ""
    epochs: int = 1
    steps_per_epoch: int | None = None
    # Per replica; the global batch is batch_size * num_replicas_in_sync.
    batch_size: int = 64
    seed: int = 0
    # Extra sys.path entries for the tasks; by default the driver's working directory
    # when Ray is embedded (so `examples.x:train` imports as it does on the driver).
    python_path: list[str] = field(default_factory=list)
    # Passed to the training function untouched (ctx.params).
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckpointConfig:
    every_epochs: int = 1
    every_steps: int = 0
    keep_last: int = 3
    # Relaunching with the same run.name resumes from the latest committed checkpoint.
    resume: bool = True
    # After training, the Keras model given to ctx.restore(model=...) is saved (tf-keras SavedModel) to
    # <run>/model/, loadable without raytf: tf_keras.models.load_model(...) or Result.load_model().
    export_model: bool = True
    # On Ctrl-C / SIGTERM of the driver, every task saves at an agreed step before teardown (a second
    # Ctrl-C skips it); at most interrupt_timeout_s.
    on_interrupt: bool = True
    interrupt_timeout_s: float = 60.0


@dataclass
class MetricsConfig:
    # Step metrics (and progress) every N steps from every rank; 0 = per epoch only.
    every_steps: int = 10
    # How often the driver rewrites metrics.parquet while the run goes.
    flush_interval_s: float = 5.0


@dataclass
class FailureConfig:
    # Failures retried per launch (the whole group restarts from the latest committed checkpoint); -1 = no limit.
    max_failures: int = 3
    # Retry exceptions raised by the training function after it made progress (before its first step in the
    # first attempt, and import/name errors, are never retried).
    retry_user_errors: bool = True
    # No step from a rank for this long counts as a hang (stacks dumped, group restarted).
    hang_timeout_s: float = 300.0
    # Tasks send a progress heartbeat at most this often.
    heartbeat_s: float = 2.0
    # MWMS collectives time out after this long (TF CommunicationOptions.timeout_seconds); null = never.
    # TF starts a thread per collective when set, so prefer the hang timeout.
    collective_timeout_s: float | None = None


@dataclass
class StorageConfig:
    # A local path or a pyarrow.fs URI (file://, s3://, gs://, hdfs://).
    path: str = "./runs"
    # s3:// only. Credentials come from the environment (AWS_ACCESS_KEY_ID, ...) unless set here; either
    # way they are never written to config.yaml, result.json or the logs.
    endpoint_override: str | None = None
    scheme: str | None = None  # "http" for a plain-HTTP endpoint such as a local S3 server
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    # Checkpoint uploads run beside training: at most this many at once (a save waits for a free slot),
    # each retried with exponential back-off.
    max_inflight_uploads: int = 1
    upload_retries: int = 5
    upload_backoff_s: float = 0.5


@dataclass
class RunConfig:
    # None = derived from the start time ("run-20261122-215832").
    name: str | None = None


@dataclass
class SweepConfig:
    """`python -m raytf.launch conf/sweep.yaml`: a non-empty space makes the launch a sweep (raytf.sweep)."""

    # Dotted config keys -> lists of values (a grid).
    space: dict[str, Any] = field(default_factory=dict)
    max_concurrent: int = 1
    num_samples: int = 1
    # What early stopping optimises, e.g. val_loss / min; scheduler: null (run all) or asha.
    metric: str | None = None
    mode: str = "min"
    scheduler: str | None = None
    name: str | None = None


@dataclass
class Config:
    ray: RayConfig = field(default_factory=RayConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    failure: FailureConfig = field(default_factory=FailureConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    run: RunConfig = field(default_factory=RunConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)


def load_config(
    source: str | Path | Mapping[str, Any] | Config | None = None,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
) -> Config:
    """Build a validated Config from a YAML path, a dict or a Config, plus overrides.

    Args:
        source: a YAML file path, a (nested) dict, an existing Config, or None for defaults.
        overrides: `["key=value", ...]` (OmegaConf dotlist) or a `{"dotted.key": value}` mapping.

    Returns:
        A Config of plain dataclasses.

    Raises:
        ConfigError: one line naming the key, the bad value and how to fix it.
    """
    try:
        layers = [OmegaConf.structured(Config)]
        if isinstance(source, (str, Path)):
            path = Path(source)
            if not path.is_file():
                raise ConfigError(f"config file {str(source)!r} not found: pass the path of a YAML file")
            layers.append(OmegaConf.load(path))
        elif isinstance(source, Config):
            layers.append(OmegaConf.structured(source))
        elif isinstance(source, Mapping):
            layers.append(OmegaConf.create(dict(source)))
        elif source is not None:
            raise ConfigError(f"config source {source!r} is not a path, dict or Config")
        if overrides:
            layers.append(_overrides_layer(overrides))
        cfg = OmegaConf.to_object(OmegaConf.merge(*layers))
    except OmegaConfBaseException as e:
        raise ConfigError(_one_line(e)) from None
    assert isinstance(cfg, Config)
    validate(cfg)
    return cfg


def _overrides_layer(overrides: Sequence[str] | Mapping[str, Any]):
    if isinstance(overrides, Mapping):
        layer = OmegaConf.create()
        for key, value in overrides.items():
            OmegaConf.update(layer, key, value, force_add=True)
        return layer
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value: write e.g. train.epochs=3")
    return OmegaConf.from_dotlist(list(overrides))


def _one_line(e: OmegaConfBaseException) -> str:
    # OmegaConf's first line already names the key and suggests spellings; its extra lines
    # (full_key, object_type) repeat it. Keep one line, with the full key made explicit.
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    full_key = getattr(e, "full_key", None)
    if full_key and full_key not in first:
        first = f"{full_key}: {first}"
    return re.sub(r"\s+", " ", first)


def _positive(value: float, key: str, fix: str = "use a number > 0") -> None:
    if value is None or value <= 0:
        raise ConfigError(f"{key} ({value}) must be positive: {fix}")


def _non_negative(value: float, key: str, fix: str) -> None:
    if value is None or value < 0:
        raise ConfigError(f"{key} ({value}) must not be negative: {fix}")


_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
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
    _validate_roles(cfg)
    if not t.entrypoint:
        raise ConfigError("train.entrypoint is empty: set it to package.module:function, e.g. "
                          "examples.keras_cnn:train")
    if not _ENTRYPOINT.match(t.entrypoint):
        raise ConfigError(f"train.entrypoint ({t.entrypoint!r}) must look like package.module:function")
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


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain-python view of a Config (enums as their YAML spelling)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


SECRET = "***"
_SECRET_NAME = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL)", re.IGNORECASE)


def redacted(cfg: Config) -> Config:
    """A copy safe to write or log: storage credentials and secret-looking runtime_env variables masked."""
    import copy

    out = copy.deepcopy(cfg)
    if out.storage.access_key is not None:
        out.storage.access_key = SECRET
    if out.storage.secret_key is not None:
        out.storage.secret_key = SECRET
    env = out.ray.runtime_env.get("env_vars") if isinstance(out.ray.runtime_env, dict) else None
    if isinstance(env, dict):
        for k in env:
            if _SECRET_NAME.search(str(k)):
                env[k] = SECRET
    return out
