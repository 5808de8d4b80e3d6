"""The single-process TensorFlow tier: TensorFlow in this process (or a child of it), no Ray.

TF_USE_LEGACY_KERAS must be set before TensorFlow's first import in a process (tf.keras is then tf-keras, as in
every raytf task); its thread pools are capped once, before it initialises its devices."""

import os

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


@pytest.fixture(scope="session")
def tf():
    from raytf._task import tf_runtime

    tf_runtime.configure(threads=1, gpu_memory_growth=False)
    return tf_runtime.tf
