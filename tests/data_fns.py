"""Ray Data input for the host bed's tests (tests/cluster/test_hosts_data.py): a train.datasets factory whose
preprocessing is pinned to the hosts that offer the custom resource `preprocess`, and a training function that
records, per epoch, which rows it read and where each was preprocessed."""

from __future__ import annotations

from typing import Any

import numpy as np

import raytf


def mark_host(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The preprocessing (a Ray Data task): y from id, and the address of the node it ran on."""
    import ray

    return {**batch, "y": batch["id"] * 2.0, "host": np.full(len(batch["id"]), ray.util.get_node_ip_address())}


def pinned(cfg: raytf.Config) -> dict[str, Any]:
    """train.datasets=tests.data_fns:pinned: train.params.rows ids, preprocessed only where `preprocess` is."""
    import ray

    rows = ray.data.range(int(cfg.train.params.get("rows", 256)), override_num_blocks=8)
    return {"train": rows.map_batches(mark_host, batch_format="numpy", num_cpus=0.5, resources={"preprocess": 1})}


def record_rows(ctx: raytf.TrainContext) -> None:
    """Reads its share of `train` through ctx.dataset each epoch (no model); writes the ids and preprocessing hosts
    it saw, and how long its first batch took, to train.params.out_dir/a<attempt>-e<epoch>-r<rank>.json."""
    import json
    import os
    import time

    for epoch in ctx.epoch_range():
        ids, hosts, started, first_batch_s = [], [], time.monotonic(), None
        for features, _ in ctx.dataset("train", ["id", "host"], "y"):
            first_batch_s = first_batch_s or time.monotonic() - started
            ids += [int(i) for i in features["id"].numpy()]
            hosts += [h.decode() for h in features["host"].numpy()]
            ctx.step_end()
        with open(os.path.join(ctx.params["out_dir"], f"a{ctx.attempt}-e{epoch}-r{ctx.rank}.json"), "w") as f:
            json.dump({"ids": ids, "hosts": hosts, "first_batch_s": first_batch_s}, f)
        ctx.epoch_end({"rows": float(len(ids))})
