"""Keras 3 in a multi-task cluster (raytf issue 54): most TensorFlow code written since TF 2.16 says `import keras`,
which is Keras 3, and Keras 3's `Model.fit` cannot train under MultiWorkerMirroredStrategy or
ParameterServerStrategy (keras-team/keras#20585, open: its TensorFlow distribution support is a prototype; TF 2.21
and Keras 3.15 fail in the first step with "Attempt to convert a value (PerReplica:{...}) with an unsupported type"
and a dump of the input tensor). tf-keras trains there, and its API is Keras 2's: handing a Keras 3 program tf-keras
under the name `keras` would break it elsewhere (tf-keras has no `keras.ops`, `keras.config`, `keras.random`,
`keras.Layer`, `keras.version`, and 38 of Keras 3's layers), so such a program is refused when it calls `fit`, before
any step, in one line with the two fixes. Pure."""

from __future__ import annotations

import json
from typing import Any

UPSTREAM = "keras-team/keras#20585"


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


def refusal(method: str, keras_version: str, tf_config: str | dict[str, Any] | None,
            tf_keras_version: str | None) -> str | None:
    """The line that refuses Keras 3's `Model.<method>` in a task of a cluster of several tasks; None where it may
    run (a task alone: a single-task strategy, one MWMS worker, the evaluator)."""
    if not keras_version.startswith("3") or cluster_tasks(tf_config) < 2:
        return None
    installed = f" (tf-keras {tf_keras_version} is installed)" if tf_keras_version else \
        " (pip install tf-keras, the version of your TensorFlow)"
    return (f"Keras 3 (keras {keras_version}) cannot train with Model.{method} on a cluster of several TensorFlow "
            f"tasks (MultiWorkerMirroredStrategy, ParameterServerStrategy): its TensorFlow distribution support is a "
            f"prototype that fails in the first step ({UPSTREAM}). Fix: use tf-keras, which trains there: "
            f"`import tf_keras as keras`{installed}, or `tf.keras`, which raytf makes tf-keras "
            "(TF_USE_LEGACY_KERAS=1)")
