"""Actor-side TensorFlow plumbing: threads, strategy construction, collective checkpoint writes.

Imported only inside task processes, after TF_CONFIG and TF_USE_LEGACY_KERAS are set.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

import tensorflow as tf

from raytf._core import checkpoints
from raytf._core import private_apis as apis
from raytf.config import Collective, Config, CrossDeviceOps, Strategy

log = logging.getLogger(__name__)


def import_keras() -> None:
    """tf-keras imported (a standby's warm-up: its import is most of the rest of a first step's cost). Neither
    import initialises TF's context: the task's thread caps are set later, by `configure`."""
    import tf_keras  # noqa: F401


def configure(threads: int, gpu_memory_growth: bool) -> None:
    """Before TF initialises its devices: cap its thread pools to the task's CPU share (two tasks on two
    cores otherwise thrash), and optionally let GPU memory grow instead of being taken whole at start. tf.data
    iterators are torn down off the training thread from now on (raytf/_task/tfdata.py: TF's end-of-fit stall)."""
    from raytf._task import tfdata

    tfdata.install()
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    if gpu_memory_growth:
        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)


def keep_own_writes(root: str) -> None:
    """Under MultiWorkerMirroredStrategy tf-keras has a worker that is not the chief write its ModelCheckpoint and
    BackupAndRestore saves (collective: every worker must) into a temporary directory and delete it at once, as
    all of them share the chief's directory on a shared filesystem. Under raytf every task has directories of its
    own (its working directory, $RAYTF_CHECKPOINT_DIR, both under `root`): there each worker keeps what it wrote,
    so a program's `model.load_weights(tf.train.latest_checkpoint(dir))` finds the same, latest checkpoint on every
    worker, not the one its directory was restored with at the attempt's start. Paths elsewhere (a shared
    filesystem) keep tf-keras's rule.

    The two globals are tf-keras's private API (raytf/_core/private_apis.py, OWN_WRITES): without them, or changed,
    the task refuses to start (PrivateApiMissing, a configuration failure) rather than resume workers from different
    checkpoints."""
    apis.require(apis.OWN_WRITES)
    dfu, _ = apis.owner(apis.WRITE_DIRPATH)

    global _own_root
    first, _own_root = _own_root is None, os.path.realpath(root)
    if not first:  # patched already (an actor that runs again): the new root is enough
        return
    write_dirpath, remove_temp_dirpath = dfu.write_dirpath, dfu.remove_temp_dirpath

    def write_dirpath_own(dirpath, strategy):
        if owns(dirpath):
            tf.io.gfile.makedirs(dirpath)
            return dirpath
        return write_dirpath(dirpath, strategy)

    def remove_temp_dirpath_own(dirpath, strategy):
        if not owns(dirpath):
            remove_temp_dirpath(dirpath, strategy)

    # tf-keras looks both up as module globals at each call (write_filepath, ModelCheckpoint, BackupAndRestore).
    dfu.write_dirpath, dfu.remove_temp_dirpath = write_dirpath_own, remove_temp_dirpath_own


_own_root: str | None = None


def owns(dirpath: str) -> bool:
    """Whether `dirpath` is in this task's own directories (keep_own_writes' root): written in place by every
    worker, tf-keras's saves and Keras 3's (_task/keras3.py)."""
    if _own_root is None:
        return False
    path = os.path.realpath(dirpath)
    return path == _own_root or path.startswith(_own_root + os.sep)


def build_strategy(cfg: Config, role: str) -> tf.distribute.Strategy:
    s = cfg.cluster.strategy
    if role == "evaluator":
        return tf.distribute.get_strategy()
    if s is Strategy.parameter_server:
        return build_parameter_server(cfg)
    if s is Strategy.mirrored:
        return tf.distribute.MirroredStrategy(cross_device_ops=_cross_device_ops(cfg.cluster.cross_device_ops))
    if s is Strategy.central_storage:
        return tf.distribute.experimental.CentralStorageStrategy()
    return build_multi_worker_mirrored(cfg)


def _cross_device_ops(choice: CrossDeviceOps):
    if choice is CrossDeviceOps.nccl:
        return tf.distribute.NcclAllReduce()
    if choice is CrossDeviceOps.hierarchical_copy:
        return tf.distribute.HierarchicalCopyAllReduce()
    if choice is CrossDeviceOps.reduction_to_one:
        return tf.distribute.ReductionToOneDevice()
    return None  # TF picks (NCCL on GPUs when it can)


def versions() -> dict[str, str]:
    # tf.keras resolves to "tf_keras..." when TF_USE_LEGACY_KERAS took effect; "keras..." would mean
    # Keras 3 slipped in (and multi-worker fit would fail).
    from importlib.metadata import PackageNotFoundError, version

    package = getattr(tf.keras, "__name__", "keras").split(".")[0]
    try:
        keras_version = version(package.replace("_", "-"))
    except PackageNotFoundError:
        keras_version = "?"
    return {"tensorflow": tf.__version__, "keras": f"{package} {keras_version}"}


def build_multi_worker_mirrored(cfg: Config) -> tf.distribute.Strategy:
    impl = {
        Collective.auto: tf.distribute.experimental.CommunicationImplementation.AUTO,
        Collective.ring: tf.distribute.experimental.CommunicationImplementation.RING,
        Collective.nccl: tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[cfg.cluster.collective]
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=impl, timeout_seconds=cfg.failure.collective_timeout_s)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def build_parameter_server(cfg: Config) -> tf.distribute.Strategy:
    """The coordinator's strategy; variables are placed on (and optionally sharded across) the ps tasks."""
    from raytf.config import Partitioner

    ps = cfg.cluster.ps
    partitioner = None
    if ps.variable_partitioner is Partitioner.min_size_max_shards:
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=ps.min_shard_bytes, max_shards=ps.max_shards or cfg.cluster.num_ps)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def coordinator(strategy: tf.distribute.Strategy):
    """ParameterServerStrategy's ClusterCoordinator (the same one Keras' model.fit uses)."""
    return tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)


def unsharded(ds: tf.data.Dataset) -> tf.data.Dataset:
    """`ds` with tf.distribute's auto-sharding off (its rows are shared out already: Ray Data input)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options)


def start_server(role: str, index: int) -> tf.distribute.Server:
    """A ps or worker task of ParameterServerStrategy: an in-process gRPC server the coordinator drives."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.Server(resolver.cluster_spec(), job_name=role, task_index=index,
                                protocol=resolver.rpc_layer or "grpc", start=True)


class CheckpointWriter:
    """Writes a tf.train.Checkpoint on every task (the save is collective under MWMS); only the
    chief's copy is uploaded and committed, the others go to a scratch directory and are dropped."""

    def __init__(self, trackables: dict, *, is_chief: bool, scratch_root: str) -> None:
        self.checkpoint = tf.train.Checkpoint(**trackables)
        model = trackables.get("model")
        self.model = model if isinstance(model, tf.keras.Model) else None
        self.is_chief = is_chief
        self.scratch_root = scratch_root
        self._said_partial = False  # (an evaluator restores every checkpoint: the partial restore said once)

    def restore(self, prefix: str, name: str, *, partial: bool, evaluator: bool = False) -> None:
        """Restore the checkpoint at `prefix` (`name`, for the message); one that does not fit the objects is refused
        (CheckpointMismatch) unless `partial` (checkpoint.partial_restore: then said once, as a warning). An
        `evaluator`'s objects may lack what only training holds (the optimizer): only what they have and the
        checkpoint lacks counts."""
        from raytf._task import restore_fit

        fit = restore_fit.check(self.checkpoint, prefix)
        if evaluator:
            fit = fit.held_by_the_model()
        if not fit:
            if not partial:
                raise restore_fit.CheckpointMismatch(fit.line(name))
            if not self._said_partial:
                self._said_partial = True
                log.warning("%s", fit.line(name, refused=False))
        # expect_partial: optimizer slots are created on the first step and restored then.
        self.checkpoint.read(prefix).expect_partial()

    def write(self, epoch: int, step: int) -> str:
        """Write locally; returns the local directory holding this task's copy."""
        local = tempfile.mkdtemp(prefix=f"{checkpoints.checkpoint_name(epoch, step)}-", dir=self.scratch_root)
        # A tensor prefix: a new Python string each time would retrace the saver's tf.function.
        self.checkpoint.write(tf.constant(os.path.join(local, checkpoints.TF_PREFIX)))
        if not self.is_chief:
            shutil.rmtree(local, ignore_errors=True)
        return local

    def export_model(self) -> str | None:
        """Save the Keras model (every task takes part, as model.save is collective under MWMS); returns the
        chief's local SavedModel directory, None elsewhere."""
        if self.model is None:
            return None
        local = tempfile.mkdtemp(prefix="model-", dir=self.scratch_root)
        self.model.save(os.path.join(local, "model"))
        if not self.is_chief:
            shutil.rmtree(local, ignore_errors=True)
            return None
        return os.path.join(local, "model")
