"""`raytf.dataset`: Ray Data input in a script run by raytf (train.script / train.module).

The script's process is not a Ray worker: its task's actor (`script/feed.py`'s DataFeed) iterates the task's
shares and streams them here as Arrow over a Unix socket, one connection per pass. TensorFlow and pyarrow are
imported on the first call, not with `import raytf`.
"""

from __future__ import annotations

import contextlib
import json
import numbers
import os
import socket
from collections.abc import Iterator
from typing import Any

from raytf._core.data import DatasetNotGiven
from raytf._task.script import feed


def dataset(name: str, feature_columns: str | list[str], label_columns: str | list[str], *, batch_size: int):
    """This task's share of the run's Ray Dataset `name` (raytf.fit's datasets=, or train.datasets) as a
    tf.data.Dataset of (features, labels), in a script run by raytf (script mode).

    A string of columns gives one tensor, a list a dict of tensors by column name. A tensor column (numpy arrays in
    the rows, Ray's tensor type, or a fixed-size list) comes out as (batch, *shape); a list column of one length
    as (batch, length).

    `batch_size` is the dataset's batch, what the script would pass to `tf.data.Dataset.batch`: under
    tf.distribute (Keras `fit`, `strategy.experimental_distribute_dataset`) the global batch, per-replica batch *
    `strategy.num_replicas_in_sync`, which TF splits among the replicas. TF's auto-sharding is off: an MWMS
    worker's rows are its equal share already, and its replicas read every one of them once a pass. The last batch
    may be smaller. Each iteration of the dataset (Keras: each epoch) reads the share again; every worker's pass
    has as many batches, so leave `steps_per_epoch` out.

    Raises:
        RuntimeError: outside a script run by raytf with datasets given.
        KeyError: the run was not given a dataset `name`.
        ValueError: a column it does not have, or one that cannot be a tensor.
    """
    path = os.environ.get(feed.SOCKET_ENV)
    if not path:
        raise RuntimeError(f"raytf.dataset({name!r}) works only in a script run by raytf (train.script or "
                           "train.module) with datasets given (raytf.fit(cfg, datasets={...}) or train.datasets); a "
                           "training function uses ctx.dataset")
    given = [n for n in os.environ.get(feed.NAMES_ENV, "").split(",") if n]
    if name not in given:
        raise DatasetNotGiven(feed.missing(name, given))
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"raytf.dataset({name!r}): batch_size ({batch_size!r}) must be a positive integer (the "
                         "global batch: per-replica batch * num_replicas_in_sync)")
    import tensorflow as tf

    features, labels = _names(feature_columns), _names(label_columns)
    columns = list(dict.fromkeys(features + labels))
    schema = _schema(path, name)
    specs = {c: _spec(tf, name, schema, c) for c in columns}
    types = {c: schema.field(c).type for c in columns}
    dims = {c: tuple(specs[c].shape.as_list()[1:]) for c in columns}
    request = {"op": "epoch", "name": name, "batch_size": int(batch_size), "columns": columns}

    def pick(arrays: dict[str, Any], which: str | list[str], names: list[str]):
        return arrays[which] if isinstance(which, str) else {c: arrays[c] for c in names}

    def one_pass():
        with _open(path, request) as reader:
            for batch in _batches(reader, name):
                arrays = {c: _numpy(name, c, batch.column(c), types[c], dims[c]) for c in columns}
                yield pick(arrays, feature_columns, features), pick(arrays, label_columns, labels)

    signature = (pick(specs, feature_columns, features), pick(specs, label_columns, labels))
    ds = tf.data.Dataset.from_generator(one_pass, output_signature=signature)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return ds.with_options(options)


def _names(columns: str | list[str]) -> list[str]:
    return [columns] if isinstance(columns, str) else list(columns)


def _schema(path: str, name: str):
    """The dataset's columns (pyarrow), asked of the feed: no pass started."""
    with _open(path, {"op": "schema", "name": name}) as reader:
        for _ in _batches(reader, name):
            pass
        return reader.schema


def _spec(tf, name: str, schema, column: str):
    """The column's TensorSpec: (None, *its fixed shape), or (None, None) for a list column."""
    import pyarrow as pa

    if column not in schema.names:
        raise ValueError(f"raytf.dataset({name!r}): no column {column!r} (columns: {', '.join(schema.names)})")
    field = schema.field(column)
    t, dims = field.type, []
    while pa.types.is_fixed_size_list(t):
        dims.append(t.list_size)
        t = t.value_type
    if not dims and (pa.types.is_list(t) or pa.types.is_large_list(t)):
        dims, t = [None], t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        dtype = tf.string
    elif pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
        dtype = tf.as_dtype(t.to_pandas_dtype())
    else:
        what = (field.metadata or {}).get(b"type", b"").decode() or str(field.type)
        raise ValueError(f"raytf.dataset({name!r}): column {column!r} holds {what}, which cannot be a tensor. Fix: "
                         "numbers, strings, or arrays of one shape (convert it with ds.map_batches)")
    return tf.TensorSpec((None, *dims), dtype, name=column)


def _numpy(name: str, column: str, array, want, dims: tuple):
    """A batch's column as one numpy array of (rows, *dims)."""
    if array.type != want:
        array = array.cast(want)
    if array.null_count:
        raise ValueError(f"raytf.dataset({name!r}): column {column!r} has {array.null_count} missing value(s) in a "
                         "batch. Fix: fill or drop them (ds.map_batches, ds.filter)")
    rows = len(array)
    if dims == (None,):  # a list column: one length in the batch, or no tensor
        lengths = set(array.value_lengths().to_numpy(zero_copy_only=False).tolist())
        if len(lengths) > 1:
            raise ValueError(f"raytf.dataset({name!r}): column {column!r} holds lists of different lengths "
                             f"({min(lengths)} to {max(lengths)}). Fix: pad them to one length, or store arrays of "
                             "one shape (numpy arrays in the rows)")
        return array.flatten().to_numpy(zero_copy_only=False).reshape(rows, lengths.pop() if lengths else 0)
    for _ in dims:
        array = array.flatten()  # (a slice's offset kept)
    return array.to_numpy(zero_copy_only=False).reshape(rows, *dims)


@contextlib.contextmanager
def _open(path: str, request: dict[str, Any]):
    """One connection to the feed, one request: the reader of its Arrow stream."""
    import pyarrow as pa

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.closing(sock):
        try:
            sock.connect(path)
        except OSError as e:
            raise RuntimeError(f"raytf.dataset({request['name']!r}): the task's data feed ({path}) cannot be reached "
                               f"({e}): has its raytf task ended?") from None
        sock.sendall((json.dumps(request) + "\n").encode())
        with sock.makefile("rb") as f:
            yield pa.ipc.open_stream(f)


def _batches(reader, name: str) -> Iterator[Any]:
    """The stream's batches up to its marker; raises the feed's error, or on a stream cut short."""
    while True:
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            raise ConnectionError(f"raytf.dataset({name!r}): the task's data feed stopped mid-pass") from None
        how = meta.get(feed.MARKER) if meta else None
        if how == feed.END.encode():
            return
        if how == feed.ERROR.encode():
            error = DatasetNotGiven if meta.get("kind") == feed.MISSING.encode() else RuntimeError
            raise error(meta.get("message", b"").decode())
        yield batch
