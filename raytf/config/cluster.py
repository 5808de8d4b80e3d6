"""The configuration's cluster section: how many tasks of each role, what each reserves, elastic training (a part
of the schema, config/schema.py). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from raytf.config.choices import Collective, CrossDeviceOps, Partitioner, PlacementStrategy, Strategy


@dataclass
class Resources:
    # CPUs each task of this role reserves (one placement-group bundle per task).
    cpus: float = 1.0
    # GPUs each task of this role reserves (Ray sets its `CUDA_VISIBLE_DEVICES`).
    gpus: float = 0.0
    # Memory each task of this role reserves, in GB; null reserves none.
    memory_gb: float | None = None
    # Custom Ray resources each task of this role reserves, e.g. `{accel: 1}`.
    custom: dict[str, float] = field(default_factory=dict)


@dataclass
class PsConfig(Resources):
    """A parameter server's reservation, and how variables are split across the servers."""

    # How variables are split across the parameter servers.
    variable_partitioner: Partitioner = Partitioner.none
    # min_size_max_shards: shards of at least this many bytes, at most max_shards (null = num_ps).
    min_shard_bytes: int = 256 * 1024
    # See `cluster.ps.min_shard_bytes`.
    max_shards: int | None = None


@dataclass
class EvaluatorConfig(Resources):
    """The optional side-car evaluator: runs train.eval_entrypoint on each new checkpoint."""

    # Run the side-car evaluator (`train.eval_entrypoint`).
    enabled: bool = False
    # Grace period for the evaluator to finish the last checkpoint once training is done.
    finish_timeout_s: float = 300.0


@dataclass
class ElasticConfig:
    """Elastic training (cluster.min_workers below cluster.num_workers): fewer workers while hosts are lost, the
    full size again when they return. Each resize is a restart of the group from a checkpoint."""

    # After a failure, how long to wait for the full group before restarting with as many workers as can be
    # placed now (at least cluster.min_workers).
    wait_s: float = 30.0
    # While smaller than cluster.num_workers: how often to look for the capacity of the missing workers. When it
    # is there, every worker saves at one agreed step and the group restarts at full size from that save.
    grow_check_s: float = 30.0
    # false: train.batch_size stays per replica and the global batch follows the size. true: the global batch
    # stays train.batch_size x the full size's replicas (a size that does not divide it is skipped).
    keep_global_batch: bool = False
    # Resizes one launch may make (shrinks and grows); past it the group keeps its size (a flapping host).
    max_resizes: int = 10


@dataclass
class ClusterConfig:
    # The `tf.distribute` strategy.
    strategy: Strategy = Strategy.multi_worker_mirrored
    # TF workers (one Ray actor and one placement-group bundle each): the size wanted.
    num_workers: int = 2
    # Elastic training: the fewest workers to train with while hosts are lost (see `cluster.elastic`); null =
    # cluster.num_workers (not elastic: a lost host is waited for, up to cluster.placement_timeout_s).
    min_workers: int | None = None
    elastic: ElasticConfig = field(default_factory=ElasticConfig)
    # What each worker reserves.
    worker: Resources = field(default_factory=Resources)
    # parameter_server only: what the coordinator task reserves.
    chief: Resources = field(default_factory=Resources)
    # parameter_server only: the number of parameter servers.
    num_ps: int = 0
    ps: PsConfig = field(default_factory=PsConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    # How Ray places the tasks' bundles on the nodes.
    placement_strategy: PlacementStrategy = PlacementStrategy.PACK
    # How long to wait for the placement group before failing with what is missing.
    placement_timeout_s: float = 60.0
    # On a cluster raytf joined whose nodes could hold the run but others' runs or jobs hold what it needs: how much
    # longer it waits its turn (a queue), saying every minute what it waits for; null = as long as it takes, 0 =
    # fail at cluster.placement_timeout_s. An embedded Ray never queues (nothing else will free it).
    queue_timeout_s: float | None = None
    # Deadline for every task to start and report its address, and for the strategy's start-up barrier.
    startup_timeout_s: float = 120.0
    # multi_worker_mirrored's all-reduce (TF `CommunicationOptions`).
    collective: Collective = Collective.auto
    # mirrored only: how the task's GPUs all-reduce.
    cross_device_ops: CrossDeviceOps = CrossDeviceOps.auto
    # Let TF grow GPU memory as needed instead of taking it all at start-up.
    gpu_memory_growth: bool = True
    # Address advertised in the cluster spec; null = the node's address as Ray reports it
    # (127.0.0.1 when raytf starts an embedded single-machine Ray).
    advertise_address: str | None = None
    # TF intra/inter-op threads per task; null = the task's CPU reservation (at least 1).
    threads: int | None = None
    # `[low, high]`: every TF task's port is reserved in this range (inclusive), so one firewall rule admitting
    # only the cluster's hosts covers them all (docs/security.md); null = any free port the OS gives.
    port_range: list[int] | None = None
    # Standby task processes (TensorFlow already imported, no strategy yet) kept per node for this run's
    # runtime_env, refilled once each attempt's first step is in; a retry's or a later run's tasks start in them
    # (~4 s sooner). Each holds ~300 MB and reserves no CPU; tasks with GPUs never use them, nor runs whose
    # ray.runtime_env has secret-looking entries. 0: none.
    standby: int = 2
