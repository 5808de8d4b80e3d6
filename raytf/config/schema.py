"""The typed run configuration: one dataclass schema (its choices, enums whose names are what users type in YAML,
are config/choices.py's). Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from raytf.config.choices import SINGLE_TASK_STRATEGIES as SINGLE_TASK_STRATEGIES  # (re-exported: its old home)
from raytf.config.choices import (
    ProcessingMode,
    ShipCode,
    StreamOutput,
)
from raytf.config.cluster import ClusterConfig


@dataclass
class RayConfig:
    # null starts an embedded local Ray; "auto" or "ray://host:port" joins a running cluster.
    address: str | None = None
    # Ray runtime_env for the tasks; raytf adds, unless set here: `TF_USE_LEGACY_KERAS=1`,
    # `TF_GRPC_REUSE_PORT=true` (TF binds the port raytf holds), `TF_CPP_MIN_LOG_LEVEL=1`, `OMP_NUM_THREADS`
    # (see `cluster.threads`), and for ParameterServerStrategy `GRPC_FAIL_FAST=use_caller`. Its `working_dir`,
    # `py_modules` and `excludes` go to the Ray job (`ray.init`), the only place Ray takes local paths.
    runtime_env: dict[str, Any] = field(default_factory=dict)
    # Joining a cluster (not an embedded Ray), the directory you launch from goes to every task as the Ray job's
    # working_dir, as `ray job submit --working-dir .` sends it: `.gitignore` and `.rayignore` honoured; `.git`,
    # virtual environments and a `storage.path` inside it left out; Ray's limit is 512 MiB. Relative `train.script`
    # and `train.python_path` then mean the task's own copy. Nothing is shipped twice: not under `ray job submit`
    # (the job has its working_dir), not with your own `ray.runtime_env.working_dir`, not when this process joined
    # Ray itself before raytf. `off`: the nodes have the code already (an image, the same path on NFS).
    ship_code: ShipCode = ShipCode.auto
    # Embedded Ray only: CPUs to offer (null = all of this machine's).
    num_cpus: int | None = None
    # The dashboard costs ~2 s of start-up; ray.util.state needs it.
    include_dashboard: bool = False
    # Ray prints on the driver what its worker processes print outside raytf's capture (Ray's own messages about
    # them). A task's output itself reaches the driver through raytf (`train.stream_output`), never through Ray.
    log_to_driver: bool = True


@dataclass
class TrainConfig:
    # The user's training function, as "package.module:function". A function given to raytf.fit(train_fn=...) is
    # recorded here: its "package.module:function", or `<function train defined in __main__>` when it was sent by
    # value (defined in a notebook or a script run as `__main__`), which only a program giving it again can run.
    entrypoint: str | None = ""
    # Or an existing tf.distribute program, run unmodified on every task that runs user code (all MWMS
    # workers; the ParameterServerStrategy chief): a file (`script`) or a module run like `python -m`
    # (`module`), with command-line `args`. Exactly one of entrypoint, script and module is set. A relative
    # `script` is found in each task's own copy of the shipped directory (`ray.ship_code`, `ray job submit`), else
    # from the directory you launch in, at the same path on every node; an absolute one (baked into the nodes'
    # image) is taken as it is. Every task checks it sees it before any training.
    script: str | None = ""
    # See `train.script`.
    module: str | None = ""
    # See `train.script`. Filled in per task (quote them: `"{checkpoint_dir}"`): `{checkpoint_dir}`, `{log_dir}`,
    # `{work_dir}` (the task's own working directory, where the program runs), `{launch_dir}` (the directory the
    # task was started in: relative input paths), `{rank}`, `{role}`, `{index}`, `{attempt}`, `{run_dir}`. A list,
    # also on the command line: `'train.args=[--epochs,3,--dir,"{log_dir}"]'`.
    args: list[str] = field(default_factory=list)
    # Whose output the driver prints, prefixed with role and rank (`[worker 0] ...`): a training function's prints
    # and a script's stdout/stderr (CLI: --all-ranks). TensorFlow's log lines are left out (`train.show_tf_logs`);
    # raytf's own warnings are printed from every rank. Every rank's output is kept whole in its log.
    stream_output: StreamOutput = StreamOutput.rank0
    # Print TensorFlow's log lines too (its C++ start-up lines, `WARNING:tensorflow:...`), for the ranks whose
    # output is printed (CLI: --tf-logs). They are in each task's log either way.
    show_tf_logs: bool = False
    # The evaluator's function (cluster.evaluator.enabled), as "package.module:function" (or raytf.fit(eval_fn=...),
    # recorded as train.entrypoint is).
    eval_entrypoint: str = ""
    # Ray Data input, from the CLI: "package.module:function" returning {name: ray.data.Dataset}, called on the
    # driver with the run's Config (or with nothing). Each worker reads its equal share of every dataset with
    # `ctx.dataset(name)` (a script: `raytf.dataset(name)`); `raytf.fit(cfg, datasets={...})` takes them directly.
    datasets: str = ""
    # Epochs in all: a relaunch that resumes trains the ones still missing.
    epochs: int = 1
    # `ctx.steps_per_epoch`; null: as many as the dataset has (Keras `fit`'s own default).
    steps_per_epoch: int | None = None
    # Per replica; the global batch is batch_size * num_replicas_in_sync.
    batch_size: int = 64
    # The tasks' random seed.
    seed: int = 0
    # Extra sys.path entries for the tasks (relative ones: as `train.script`); the driver's working directory is
    # one when Ray is embedded (so `examples.x:train` imports as it does on the driver). Every task checks it can
    # find the entrypoint's module, and the packages it imports, before any training.
    python_path: list[str] = field(default_factory=list)
    # Passed to the training function untouched (ctx.params).
    params: dict[str, Any] = field(default_factory=dict)
    # The function is a Ray Train `train_loop_per_worker` (raytf.compat.TensorflowTrainer sets this): it builds its
    # own MultiWorkerMirroredStrategy from TF_CONFIG, takes train.params as its `config`, and reports and checkpoints
    # with ray.train.report (each report an epoch row; rank 0's checkpoints committed), as under Ray Train.
    ray_train: bool = False


@dataclass
class CheckpointConfig:
    # Save every N epochs; 0 = never.
    every_epochs: int = 1
    # Save every N steps; 0 = never.
    every_steps: int = 0
    # Committed checkpoints kept; 0 = all.
    keep_last: int = 3
    # Relaunching with the same run.name resumes from the latest committed checkpoint.
    resume: bool = True
    # A resume whose checkpoint does not fit the objects given to ctx.restore (variables the checkpoint holds and
    # the model lacks, or the model has and the checkpoint lacks: a changed program) is refused before the first
    # step, naming them; true resumes anyway (what the model lacks is ignored, what the checkpoint lacks keeps its
    # fresh values). A changed shape always fails.
    partial_restore: bool = False
    # After training, the Keras model given to ctx.restore(model=...) is saved (tf-keras SavedModel) to
    # `<run>/model/`, loadable without raytf: tf_keras.models.load_model(...) or Result.load_model().
    export_model: bool = True
    # On Ctrl-C / SIGTERM of the driver, every task saves at an agreed step before teardown (a second
    # Ctrl-C skips it); at most interrupt_timeout_s.
    on_interrupt: bool = True
    # See `checkpoint.on_interrupt`.
    interrupt_timeout_s: float = 60.0


@dataclass
class MetricsConfig:
    # Step metrics (and progress) every N steps from every rank; 0 = per epoch only.
    every_steps: int = 10
    # How often the driver rewrites metrics.parquet while the run goes.
    flush_interval_s: float = 5.0
    # Distinct metric names a run may report (each is a column of metrics.parquet); past it the run fails.
    max_names: int = 256
    # Measure where each step's time goes (step rows' input_wait_s, collective_s, save_s, compute_s) by timing TF's
    # iterator get_next and all-reduce inside the step's graph; false leaves TF as it is (rows carry step_time_s).
    breakdown: bool = True
    # A rank whose step time, input wait or compute stays this many times above the median of the other ranks
    # (over its last `straggler_window` step rows) is reported as a straggler while the run goes, and listed in
    # result.json (`stragglers`).
    straggler_ratio: float = 1.3
    # See `metrics.straggler_ratio`: the step rows per rank it looks at.
    straggler_window: int = 5
    # Export the live figures (steps/s, examples/s, step time, input wait, GPU use, attempts, checkpoint age) as
    # Ray metrics named `raytf_*`, for Ray's Prometheus endpoint and Grafana dashboards.
    ray_metrics: bool = True


@dataclass
class FailureConfig:
    # Failures retried per launch (the whole group restarts from the latest committed checkpoint); -1 = no limit.
    max_failures: int = 3
    # Preemptions (a task's SIGTERM, or a drain of its node: every task saves at an agreed step, nothing is lost)
    # retried per launch, counted apart from failure.max_failures; -1 = no limit.
    max_preemptions: int = -1
    # Exceptions raised by the program are retried only when transient (TF's UnavailableError, AbortedError,
    # DeadlineExceededError, CancelledError; network and storage errors). True: retry the others too, once the
    # program made progress (import/name errors, errors before the first step of the first attempt and errors
    # after the last epoch are never retried).
    retry_user_errors: bool = False
    # No step from a rank for this long counts as a hang (stacks dumped, group restarted).
    hang_timeout_s: float = 300.0
    # Tasks send a progress heartbeat at most this often.
    heartbeat_s: float = 2.0
    # A task whose resident memory (GiB) grows past this is recycled: every task saves at an agreed step and the
    # group restarts in fresh processes (counted in budget.recycles, not failure.max_failures; a script's at its
    # next checkpoint). TensorFlow's MWMS grows ~10 KiB a train-function execution (tensorflow#42616). null: its
    # role's memory_gb, else 80% of its node's memory shared among the run's tasks there; 0: never recycle.
    max_task_rss_gb: float | None = None
    # MWMS collectives time out after this long (TF CommunicationOptions.timeout_seconds); null = never.
    # TF starts a thread per collective when set, so prefer the hang timeout.
    collective_timeout_s: float | None = None


@dataclass
class StorageConfig:
    # A local path or a pyarrow.fs URI (file://, s3://, gs://, hdfs://).
    path: str = "./runs"
    # s3:// only. Credentials are never sent to the tasks: each node (driver and tasks) takes them from its own
    # chain (environment AWS_ACCESS_KEY_ID/..., instance profile, ~/.aws/credentials) or storage.credentials_file.
    endpoint_override: str | None = None
    scheme: str | None = None  # "http" for a plain-HTTP endpoint such as a local S3 server
    # s3:// only: the bucket's region.
    region: str | None = None
    # s3:// only: an AWS-style credentials file (`[default]` with aws_access_key_id, aws_secret_access_key and
    # optionally aws_session_token), read by each process that opens the storage, on its own node (so the same
    # path on every node). Only its path travels to the tasks.
    credentials_file: str | None = None
    # s3:// only, reading runs in this process (raytf.load_result): a run refuses keys in its config (they would
    # travel to every task); see `storage.credentials_file`.
    access_key: str | None = None
    # See `storage.access_key`.
    secret_key: str | None = None
    # Checkpoint uploads run beside training, one at a time and in order: at most this many checkpoints
    # waiting or uploading (a further save waits for one to commit), each retried with exponential back-off.
    max_inflight_uploads: int = 1
    # See `storage.max_inflight_uploads`.
    upload_retries: int = 5
    # See `storage.max_inflight_uploads`.
    upload_backoff_s: float = 0.5
    # A checkpoint whose upload fails every retry is skipped (a warning; training goes on, the next save tries
    # again; the task's last one is tried again at its end); storage that refuses every checkpoint tried for this
    # long ends the run, naming the run directory, the error and the last checkpoint committed (0: the first
    # checkpoint refused ends it).
    unwritable_timeout_s: float = 600.0
    # The slowest storage to wait for: a rank uploading or exporting N bytes (and the ranks blocked on it) is
    # hung only after failure.hang_timeout_s plus N bytes at this rate.
    min_upload_mib_s: float = 1.0

    def __repr__(self) -> str:  # the keys are masked wherever a config is printed or logged
        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in ("access_key", "secret_key"):
            if shown[key] is not None:
                shown[key] = "***"
        return f"StorageConfig({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


@dataclass
class DataServiceConfig:
    """The training function's own tf.data pipeline run by CPU actors anywhere in the cluster (TF's tf.data service):
    `ds = ctx.data_service(ds)` (a script: `raytf.data_service(ds)`)."""

    # tf.data service workers, each a Ray actor running the pipeline (plus one dispatcher beside the first); 0: off.
    workers: int = 0
    # CPUs each service worker reserves (its TF threads follow it).
    cpus: float = 1.0
    # Custom Ray resources each service worker reserves, e.g. `{preprocess: 1}` to pin them to CPU-only hosts.
    resources: dict[str, float] = field(default_factory=dict)
    # distributed_epoch: each element once per epoch across all trainers (needs a splittable source: range,
    # from_tensor_slices, list_files); parallel_epochs: every service worker runs the whole pipeline.
    processing_mode: ProcessingMode = ProcessingMode.distributed_epoch


@dataclass
class RunConfig:
    # null = derived from the start time ("run-20261122-215832"). Letters, digits, '.', '_', '-', at most 128
    # characters. One launch at a time: a second launch of a running name is refused (exit 2).
    name: str | None = None


@dataclass
class SweepConfig:
    """`python -m raytf.launch conf/sweep.yaml`: a non-empty space makes the launch a sweep (raytf.sweep)."""

    # Dotted config keys -> lists of values (a grid).
    space: dict[str, Any] = field(default_factory=dict)
    # Trials running at once.
    max_concurrent: int = 1
    # Samples of the space (Ray Tune's `num_samples`).
    num_samples: int = 1
    # What early stopping optimises, e.g. val_loss / min; scheduler: null (run all) or asha.
    metric: str | None = None
    # See `sweep.metric`.
    mode: str = "min"
    # See `sweep.metric`.
    scheduler: str | None = None
    # The sweep's name; its trials' runs are `<storage.path>/<name>-<trial id>/`.
    name: str | None = None


@dataclass
class MlflowConfig:
    """Every run logged to MLflow by the driver (docs/tracking.md): one MLflow run per raytf run."""

    # The MLflow tracking server or store (`http://mlflow.example:5000`, `sqlite:////abs/mlflow.db`, `databricks`);
    # empty: off. Needs MLflow in the driver's environment: `pip install raytf[mlflow]` for a server, `pip install
    # mlflow` for a database URI.
    uri: str = ""
    # The MLflow experiment; null: the config file's name (`conf/local.yaml`: local), else raytf.
    experiment: str | None = None
    # Tags set on the MLflow run, e.g. `{team: vision}`.
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class TrackingConfig:
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    # At the run's end, how long the driver waits for the tracking server to take what is still to send (metrics,
    # artefacts, the final status) before giving up on it; the run's own status and exit code never depend on it.
    flush_timeout_s: float = 30.0


@dataclass
class Config:
    """A run's whole configuration, one section per top-level YAML key (every key: docs/reference/configuration.md).
    Made by `raytf.load_config` from a YAML file, a dict or defaults, plus overrides."""

    ray: RayConfig = field(default_factory=RayConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    failure: FailureConfig = field(default_factory=FailureConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    data_service: DataServiceConfig = field(default_factory=DataServiceConfig)
    run: RunConfig = field(default_factory=RunConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


def script_mode(cfg: Config) -> bool:
    """The tasks run an existing program (train.script or train.module), not a training function."""
    return bool(cfg.train.script or cfg.train.module)


def owns_loop(cfg: Config) -> bool:
    """The program counts its own epochs, batch and checkpoints, so raytf neither knows them beforehand nor saves
    for it: a script, or a Ray Train loop (train.ray_train)."""
    return script_mode(cfg) or bool(cfg.train.ray_train)
