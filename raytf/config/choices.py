"""The configuration's choices, as enums: their *names* are what users type in YAML (OmegaConf matches on the
name). Pure."""

from __future__ import annotations

import enum


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


class ShipCode(str, enum.Enum):
    auto = "auto"
    off = "off"


class Collective(str, enum.Enum):
    auto = "auto"
    ring = "ring"
    nccl = "nccl"


class CrossDeviceOps(str, enum.Enum):
    auto = "auto"
    nccl = "nccl"
    hierarchical_copy = "hierarchical_copy"
    reduction_to_one = "reduction_to_one"


class StreamOutput(str, enum.Enum):
    """Which tasks' output the driver prints (every rank's is kept in logs/ either way)."""

    rank0 = "rank0"
    all = "all"
    none = "none"


class Partitioner(str, enum.Enum):
    none = "none"
    min_size_max_shards = "min_size_max_shards"


class ProcessingMode(str, enum.Enum):
    """How the tf.data service shares a pipeline's elements (TF's `ShardingPolicy` DYNAMIC and OFF)."""

    distributed_epoch = "distributed_epoch"
    parallel_epochs = "parallel_epochs"
