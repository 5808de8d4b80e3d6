"""Keras 3 in a multi-task cluster (raytf issues 54 and 72): most TensorFlow code written since TF 2.16 says
`import keras`, which is Keras 3, and Keras 3's `Model.fit` fails under MultiWorkerMirroredStrategy with two or more
workers (keras-team/keras#20585, open) for two small reasons in its TensorFlow trainer
(`keras/src/backend/tensorflow/trainer.py`; checked against 3.15.1, read unchanged from 3.5 to the 3.16
development branch):

- before the first step, `TensorFlowTrainer._maybe_symbolic_build` reduces the whole `(x, y)` batch tuple with
  `strategy.reduce("MEAN", batch, axis=None)`, only to learn its shapes: MirroredStrategy maps that over the tuple,
  CollectiveAllReduceStrategy does not (TF's cross_device_ops calls convert_to_tensor on the tuple: "Attempt to
  convert a value (PerReplica:{...})"). A local replica's batch has the same shapes, with no collective at all;
- at the first step, `reduce_per_replica` reduces each step's scalar logs with `strategy.reduce("MEAN", v, axis=0)`:
  "Invalid reduction dimension 0" (tensorflow/tensorflow#72388). `axis=None`, the element-wise mean across
  replicas, is what its MirroredStrategy branch computes.

raytf corrects both in the task processes (_task/keras3.py), only there (Keras 3, the TensorFlow backend, MWMS of
two or more workers), after checking here that Keras still has the lines it corrects. What cannot work is refused
before the first step in one line: `fit` under ParameterServerStrategy (Keras 3's trainer has no coordinator
support), `steps_per_execution > 1` (keras-team/keras#19246: fails under MirroredStrategy too), a Keras whose
trainer the check does not recognise. Pure."""

from __future__ import annotations

import enum
import json
import re
from typing import Any

from raytf._core.private_api_record import VERIFIED

UPSTREAM = "keras-team/keras#20585"
STEPS_PER_EXECUTION_UPSTREAM = "keras-team/keras#19246"
REDUCTION_UPSTREAM = "tensorflow/tensorflow#72388"

# The lines corrected, as Keras spells them (whitespace aside; checked against 3.15.1): the batch reduced whole in
# _maybe_symbolic_build, and the step logs reduced along axis 0 in reduce_per_replica's multi-worker branch. And
# what raytf's stand-in for _maybe_symbolic_build repeats of it: the way it takes the first batch from the epoch
# iterator.
BATCH_REDUCE = 'self.distribute_strategy.reduce("MEAN",maybe_distributed_data_batch,axis=None'
LOGS_REDUCE = 'strategy.reduce("MEAN",v,axis=0)'
FIRST_BATCH = "for_,_,itiniterator:maybe_distributed_data_batch=next(it)"


class Trainer(enum.Enum):
    """What the check found in Keras 3's TensorFlow trainer."""

    CORRECTABLE = "correctable"  # both lines there: corrected
    FIXED = "fixed"  # neither is: an upstream fix, nothing to correct
    UNKNOWN = "unknown"  # one without the other, or a source not readable: refused


def recognise(symbolic_build_source: str | None, reduce_source: str | None) -> Trainer:
    """Which of the three Keras's trainer is, from the source of `TensorFlowTrainer._maybe_symbolic_build` and of
    `reduce_per_replica` (None: not readable)."""
    if symbolic_build_source is None or reduce_source is None:
        return Trainer.UNKNOWN
    build = _squeezed(symbolic_build_source)
    batch = BATCH_REDUCE in build
    logs = LOGS_REDUCE in _squeezed(reduce_source)
    if batch and logs:
        return Trainer.CORRECTABLE if FIRST_BATCH in build else Trainer.UNKNOWN
    return Trainer.FIXED if not batch and not logs else Trainer.UNKNOWN


def _squeezed(source: str) -> str:
    # (code only: a comment quoting the old line is not the line)
    return re.sub(r"\s+", "", "\n".join(line.split("#", 1)[0] for line in source.splitlines()))


def cluster_tasks(tf_config: str | dict[str, Any] | None) -> int:
    """How many tasks of TF_CONFIG's cluster this task trains with (0: none, not readable, or this task is the
    evaluator, which trains with nobody)."""
    if isinstance(tf_config, str):
        try:
            tf_config = json.loads(tf_config)
        except ValueError:
            return 0
    if not isinstance(tf_config, dict) or (tf_config.get("task") or {}).get("type") == "evaluator":
        return 0
    cluster = tf_config.get("cluster") or {}
    return sum(len(v) for k, v in cluster.items() if k != "evaluator" and isinstance(v, list | tuple))


def _tf_keras(tf_keras_version: str | None) -> str:
    installed = f" (tf-keras {tf_keras_version} is installed)" if tf_keras_version else \
        " (pip install tf-keras, the version of your TensorFlow)"
    return f"`import tf_keras as keras`{installed}, or `tf.keras`, which raytf makes tf-keras (TF_USE_LEGACY_KERAS=1)"


def parameter_server_refusal(keras_version: str, tf_keras_version: str | None, method: str = "fit") -> str:
    return (f"Keras 3 (keras {keras_version}) cannot run Model.{method} under ParameterServerStrategy: its "
            f"TensorFlow trainer has no coordinator support ({UPSTREAM}). Fix: use tf-keras there: "
            f"{_tf_keras(tf_keras_version)}, or MultiWorkerMirroredStrategy (cluster.strategy="
            "multi_worker_mirrored), where raytf trains Keras 3")


def steps_per_execution_refusal(keras_version: str, steps: object) -> str:
    return (f"Keras 3 (keras {keras_version}) cannot train with steps_per_execution={steps} under a distribution "
            f"strategy: its TensorFlow trainer fails there, under MirroredStrategy too "
            f"({STEPS_PER_EXECUTION_UPSTREAM}). Fix: compile with steps_per_execution=1 (the default)")


def unknown_trainer_refusal(keras_version: str, why: str, tf_keras_version: str | None) -> str:
    return (f"Keras 3 (keras {keras_version}) cannot train with Model.fit under MultiWorkerMirroredStrategy "
            f"({UPSTREAM}), and raytf's correction of its TensorFlow trainer does not recognise this Keras: {why}. "
            f"Fix: install a Keras raytf was verified with ({VERIFIED['keras']}), or use tf-keras: "
            f"{_tf_keras(tf_keras_version)}")


def unknown_callbacks_refusal(keras_version: str, why: str, tf_keras_version: str | None) -> str:
    return (f"Keras 3 (keras {keras_version}): raytf cannot keep a worker's ModelCheckpoint and BackupAndRestore "
            f"writes apart from the chief's in this Keras ({why}), and two workers writing one path corrupt it. "
            f"Fix: install a Keras raytf was verified with ({VERIFIED['keras']}), or use tf-keras: "
            f"{_tf_keras(tf_keras_version)}")


def batch_norm_hint(layers: list[str]) -> str:
    """The one warning for a Keras 3 model with BatchNormalization layers that do not synchronize, trained on
    several workers: their moving statistics are each worker's own."""
    shown = ", ".join(layers[:3]) + (f" and {len(layers) - 3} more" if len(layers) > 3 else "")
    return (f"Keras 3's BatchNormalization ({shown}) keeps each worker's own moving mean and variance under "
            "MultiWorkerMirroredStrategy (tf-keras averages them): the chief's, which raytf commits, saw only its "
            "own batches. Fix: BatchNormalization(synchronized=True), which also normalises each step over the "
            "global batch")
