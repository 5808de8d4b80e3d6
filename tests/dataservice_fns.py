"""Training functions for the tf.data service's tests (tests/ray/test_data_service.py, tests/cluster/
test_hosts_dataservice.py): a finite pipeline of ids read through `ctx.data_service`, each element marked, inside
its map function, with where it was preprocessed, and what each rank saw written per epoch."""

from __future__ import annotations

import json
import os
import re
import time

import raytf

# What the map function reads in the process that runs it (a TF op: the service cannot run Python): "pid" the
# process (its /proc/self/stat), "net" the host (its network namespace's addresses).
MARKS = {"pid": "/proc/self/stat", "net": "/proc/self/net/fib_trie"}
_LOCAL = re.compile(r"\|-- ([\d.]+)\n\s+/32 host LOCAL")


def where(mark: str, text: str) -> list[str]:
    """The pid, or the non-loopback addresses, a mark names."""
    if mark == "pid":
        return [text.split(" ", 1)[0]]
    return sorted({a for a in _LOCAL.findall(text) if not a.startswith("127.")})


def pipeline(ctx: raytf.TrainContext):
    """train.params.rows ids, each with its mark, batched by the global batch; `slow_ms` per element (a TF-only busy
    loop, so that a test can act mid-epoch)."""
    import tensorflow as tf

    path = MARKS[ctx.params.get("mark", "pid")]
    slow = int(ctx.params.get("slow_ms", 0))

    def mark(i):
        if slow:  # busy, in TF ops: sums until the clock moved on by `slow` ms
            t0 = tf.timestamp()
            (i,) = tf.while_loop(lambda j: tf.timestamp() - t0 < slow / 1000, lambda j: (j,), (i,))
        return i, tf.io.read_file(path)

    return tf.data.Dataset.range(int(ctx.params.get("rows", 64))).map(mark).batch(ctx.global_batch_size)


def record_served(ctx: raytf.TrainContext) -> None:
    """A custom loop over `strategy.experimental_distribute_dataset(ctx.data_service(pipeline))`, with an all-reduce
    each step (a peer that ran out first would leave it waiting); per epoch, the ids this rank saw and where they were
    preprocessed go to train.params.out_dir/a<attempt>-e<epoch>-r<rank>.json. With train.params.keras, one Keras fit
    epoch on another served pipeline follows (its end must come together too)."""
    import tensorflow as tf

    strategy, mark = ctx.strategy, ctx.params.get("mark", "pid")
    dist = strategy.experimental_distribute_dataset(ctx.data_service(pipeline(ctx)))
    with strategy.scope():
        total = tf.Variable(0, dtype=tf.int64)

    @tf.function
    def step(batch):
        def replica(ids, _):
            total.assign_add(tf.distribute.get_replica_context().all_reduce("sum", tf.reduce_sum(ids)))
        strategy.run(replica, args=batch)

    for epoch in ctx.epoch_range():
        ids, places, started = [], set(), time.monotonic()
        for batch in dist:
            step(batch)
            for i, m in zip(*(strategy.experimental_local_results(x) for x in batch)):
                ids += [int(v) for v in i.numpy()]
                places |= {p for text in m.numpy() for p in where(mark, text.decode())}
            ctx.step_end()
        with open(os.path.join(ctx.params["out_dir"], f"a{ctx.attempt}-e{epoch}-r{ctx.rank}.json"), "w") as f:
            json.dump({"ids": ids, "where": sorted(places), "pid": os.getpid(), "total": int(total.numpy()),
                       "epoch_s": time.monotonic() - started}, f)
        ctx.epoch_end({"rows": float(len(ids))})
    if ctx.params.get("keras"):
        ds = ctx.data_service(pipeline(ctx).map(lambda i, m: (tf.cast(i, tf.float32)[:, None] / 100.0,
                                                               tf.cast(i % 2, tf.float32))))
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input((1,)), tf.keras.layers.Dense(1)])
            model.compile("sgd", "mse")
        history = model.fit(ds, epochs=1, verbose=0)
        with open(os.path.join(ctx.params["out_dir"], f"a{ctx.attempt}-keras-r{ctx.rank}.json"), "w") as f:
            json.dump({"loss": history.history["loss"]}, f)
