"""Ray Data input: the digits read (from Parquet, or from scikit-learn's copy) and scaled by Ray Data, each worker
training on its equal share with Keras `fit`.

Run: python -m raytf.launch conf/ray_data.yaml
     (train.params.parquet=<dir or file>: read that instead, columns `pixels` (64 values 0-16) and `label`)
"""

from __future__ import annotations

from typing import Any

import numpy as np

import raytf


def scale(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The preprocessing, run by Ray Data's own tasks (map_batches): pixels 0-16 to 0-1."""
    return {"pixels": (np.stack(batch["pixels"]) / 16.0).astype("float32"), "label": batch["label"]}


def datasets(cfg: raytf.Config) -> dict[str, Any]:
    """train.datasets=examples.ray_data:datasets: called on the driver, where it only describes the datasets; Ray Data
    runs the reads and map_batches on the cluster's CPUs while training goes (train.params.preprocess_cpus each,
    at most train.params.preprocess_tasks at once), a new pass every epoch."""
    import ray

    params = cfg.train.params
    if params.get("parquet"):  # <dir>/train and <dir>/val
        train = ray.data.read_parquet(f"{params['parquet']}/train")
        val = ray.data.read_parquet(f"{params['parquet']}/val")
    else:
        from sklearn.datasets import load_digits

        digits = load_digits()
        rows = [{"pixels": p.astype("int64"), "label": int(t)} for p, t in zip(digits.data, digits.target)]
        order = np.random.default_rng(0).permutation(len(rows))
        cut = 1440  # 80 %, and a multiple of 2, 3, 4, ... workers: every worker reads as many rows
        train = ray.data.from_items([rows[i] for i in order[:cut]], override_num_blocks=8)
        val = ray.data.from_items([rows[i] for i in order[cut:cut + 352]], override_num_blocks=4)
    options = dict(batch_format="numpy", num_cpus=params.get("preprocess_cpus", 0.5),
                   compute=ray.data.TaskPoolStrategy(size=params.get("preprocess_tasks", 1)))
    return {"train": train.map_batches(scale, **options), "val": val.map_batches(scale, **options)}


def train(ctx: raytf.TrainContext) -> None:
    import tensorflow as tf

    with ctx.strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Input(shape=(64,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),
        ])
        model.compile(optimizer=tf.keras.optimizers.Adam(ctx.params.get("learning_rate", 0.01)),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    ctx.restore(model=model, optimizer=model.optimizer)
    # No steps_per_epoch: an epoch is each worker's whole share, the same number of batches on every worker.
    model.fit(ctx.dataset("train", "pixels", "label"), validation_data=ctx.dataset("val", "pixels", "label"),
              epochs=ctx.epochs, initial_epoch=ctx.initial_epoch, callbacks=ctx.keras_callbacks(), verbose=0)
