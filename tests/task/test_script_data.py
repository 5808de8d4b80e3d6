"""Script mode's Ray Data input without Ray: the host's DataFeed serving fake iterators on a Unix socket in a thread,
and raytf.dataset (what a script calls) reading it into tf.data, an Arrow stream per pass."""

import os
import threading

import numpy as np
import pyarrow as pa
import pytest

import raytf
from raytf._task.script import feed
from raytf._task.script.data import DatasetNotGiven


class FakeIterator:
    """What a ray.data.DataIterator offers the feed: schema() and iter_batches (pyarrow tables of batch_size rows,
    each in two chunks as Ray's batches across blocks are). `fail_after`: raise after that many batches."""

    def __init__(self, table: pa.Table, fail_after: int | None = None) -> None:
        self.table, self.fail_after = table, fail_after
        self.passes: list[int] = []  # the batch_size of each pass
        self.closed = 0

    def schema(self):
        return self.table.schema

    def iter_batches(self, *, batch_size, batch_format):
        assert batch_format == "pyarrow"
        self.passes.append(batch_size)
        return self._batches(batch_size)

    def _batches(self, batch_size):
        try:
            for n, start in enumerate(range(0, self.table.num_rows, batch_size)):
                if self.fail_after is not None and n == self.fail_after:
                    raise OSError("s3://bucket/part-3.parquet: access denied")
                rows = self.table.slice(start, batch_size)
                half = rows.num_rows // 2
                yield pa.concat_tables([rows.slice(0, half), rows.slice(half)])
        finally:
            self.closed += 1


def _rows(n=12) -> pa.Table:
    pixels = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "x": pa.array([[float(i)] * 4 for i in range(n)], pa.list_(pa.float64())),  # what from_items makes of lists
        "pixels": pa.FixedShapeTensorArray.from_numpy_ndarray(pixels),  # a tensor column (extension type)
        "fixed": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 2, dtype=np.int32)), 2),
        "word": pa.array([f"w{i}" for i in range(n)]),
        "y": pa.array(np.arange(n, dtype=np.float64) / 2),
    })


@pytest.fixture
def served(tmp_path, monkeypatch):
    """Start a feed of {name: FakeIterator}, as the host does, with the script's environment set."""
    feeds = []

    def start(iterators, names=None):
        f = feed.DataFeed(iterators, feed.socket_path(str(tmp_path))).start()
        feeds.append(f)
        env = f.env()
        if names is not None:
            env[feed.NAMES_ENV] = ",".join(names)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return f

    yield start
    for f in feeds:
        f.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("raytf-data-feed")]


def _passes(ds, epochs=2):
    return [[(f, y) for f, y in ds.as_numpy_iterator()] for _ in range(epochs)]


def test_columns_come_out_as_tensors_each_pass_a_new_read(tf, served):
    it = FakeIterator(_rows(12))
    f = served({"train": it})
    ds = raytf.dataset("train", ["id", "x", "pixels", "fixed", "word"], "y", batch_size=5)
    features, label = ds.element_spec
    assert {k: (v.shape.as_list(), v.dtype) for k, v in features.items()} == {
        "id": ([None], tf.int64), "x": ([None, None], tf.float64), "pixels": ([None, 2, 3], tf.float32),
        "fixed": ([None, 2], tf.int32), "word": ([None], tf.string)}
    assert (label.shape.as_list(), label.dtype) == ([None], tf.float64)
    assert ds.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.OFF
    assert it.passes == []  # the schema read no rows
    epochs = _passes(ds)
    assert it.passes == [5, 5] and it.closed == 2  # a new pass per iteration, each closed
    for batches in epochs:
        assert [len(y) for _, y in batches] == [5, 5, 2]
        ids = np.concatenate([b["id"] for b, _ in batches])
        assert ids.tolist() == list(range(12))
        first, y = batches[0]
        assert first["x"].shape == (5, 4) and first["x"][3].tolist() == [3.0] * 4
        assert first["pixels"].shape == (5, 2, 3) and first["pixels"][1].tolist() == [[6, 7, 8], [9, 10, 11]]
        assert first["fixed"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
        assert first["word"].tolist() == [b"w0", b"w1", b"w2", b"w3", b"w4"]
        assert y.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    # One column a tensor, not a dict; an iterator dropped mid-pass is let go (the feed's thread ends).
    single = raytf.dataset("train", "pixels", "id", batch_size=4)
    x, y = next(iter(single))
    assert x.shape == (4, 2, 3) and y.numpy().tolist() == [0, 1, 2, 3]
    f.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("raytf-data-feed")]
    assert not os.path.exists(f.path)


def test_a_tensor_column_of_rays_type_round_trips(tf, served):
    """Ray's own ArrowTensorType (numpy arrays in ray.data rows), when the Ray package is there."""
    arrow = pytest.importorskip("ray.data._internal.tensor_extensions.arrow")
    pixels = np.arange(6 * 64, dtype=np.float32).reshape(6, 64)
    table = pa.table({"pixels": arrow.ArrowTensorArray.from_numpy(pixels), "label": pa.array(range(6))})
    served({"train": FakeIterator(table)})
    ds = raytf.dataset("train", "pixels", "label", batch_size=4)
    assert ds.element_spec[0].shape.as_list() == [None, 64]
    got = np.concatenate([x for x, _ in ds.as_numpy_iterator()])
    assert np.array_equal(got, pixels)


def test_two_datasets_read_at_once(tf, served):
    """Train and validation passes interleave (Keras fit): a connection each, open together."""
    served({"train": FakeIterator(_rows(12)), "val": FakeIterator(_rows(8))})
    train = raytf.dataset("train", "id", "y", batch_size=3)
    val = raytf.dataset("val", "id", "y", batch_size=2)
    pairs = list(tf.data.Dataset.zip((train, val)).as_numpy_iterator())
    assert [(t[0].tolist(), v[0].tolist()) for t, v in pairs] == [
        ([0, 1, 2], [0, 1]), ([3, 4, 5], [2, 3]), ([6, 7, 8], [4, 5]), ([9, 10, 11], [6, 7])]


def test_a_name_not_given_is_one_line(tf, served):
    served({"train": FakeIterator(_rows())})
    with pytest.raises(DatasetNotGiven) as e:
        raytf.dataset("val", "x", "y", batch_size=4)
    assert str(e.value) == ("raytf.dataset('val'): no dataset named 'val' was given to this run (given: 'train'). "
                            "Fix: pass datasets={'val': ...} to raytf.fit, or return it from the train.datasets "
                            "function")
    assert isinstance(e.value, KeyError)


def test_the_feed_refuses_a_name_it_does_not_serve(tf, served):
    """The host's own check (the child's environment named it, the feed has no such iterator)."""
    served({"train": FakeIterator(_rows())}, names=["train", "val"])
    with pytest.raises(DatasetNotGiven, match=r"^raytf.dataset\('val'\): no dataset named 'val' .*given: 'train'"):
        raytf.dataset("val", "x", "y", batch_size=4)


def test_outside_a_raytf_script(monkeypatch):
    monkeypatch.delenv(feed.SOCKET_ENV, raising=False)
    with pytest.raises(RuntimeError, match=r"raytf.dataset\('train'\) works only in a script run by raytf"):
        raytf.dataset("train", "x", "y", batch_size=4)


def test_bad_columns_and_batch_size(tf, served):
    served({"train": FakeIterator(_rows())})
    with pytest.raises(ValueError, match=r"no column 'z' \(columns: id, x, pixels, fixed, word, y\)"):
        raytf.dataset("train", ["x", "z"], "y", batch_size=4)
    with pytest.raises(ValueError, match=r"batch_size \(0\) must be a positive integer"):
        raytf.dataset("train", "x", "y", batch_size=0)


def test_a_failing_pass_raises_in_the_script(tf, served):
    it = FakeIterator(_rows(12), fail_after=1)
    served({"train": it})
    ds = raytf.dataset("train", "id", "y", batch_size=4)
    with pytest.raises(tf.errors.OpError, match=r"reading this task's share failed: OSError: s3://bucket/part-3"):
        list(ds.as_numpy_iterator())
    assert it.closed == 1


def test_lists_of_different_lengths_are_refused(tf, served):
    table = pa.table({"x": pa.array([[1.0], [1.0, 2.0]], pa.list_(pa.float64())), "y": pa.array([0, 1])})
    served({"train": FakeIterator(table)})
    ds = raytf.dataset("train", "x", "y", batch_size=2)
    with pytest.raises(tf.errors.OpError, match="column 'x' holds lists of different lengths"):
        list(ds.as_numpy_iterator())


def test_close_ends_a_pass_the_script_stopped_reading(served, tmp_path):
    """A connection left open mid-pass (a script that stopped reading, or died): close() cuts it, its thread ends,
    the socket file goes."""
    import socket

    big = pa.table({"id": pa.array(range(200_000), pa.int64())})
    f = served({"train": FakeIterator(big)})
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(f.path)
    sock.sendall(b'{"op": "epoch", "name": "train", "batch_size": 1000, "columns": ["id"]}\n')
    sock.recv(100)  # the stream has begun; nothing more is read
    f.close(timeout=10)
    sock.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("raytf-data-feed")]
    assert not os.path.exists(f.path)


def test_child_env_names_the_socket_only_with_datasets():
    from raytf._core.plan import TaskSpec
    from raytf._task.script.host import child_env
    from tests.conftest import ROOT

    cfg = raytf.load_config(ROOT / "conf/script.yaml")
    spec = TaskSpec(role="worker", index=0, rank=0, cpus=1, gpus=0)
    common = dict(tf_config=None, spec=spec, cfg=cfg, run_uri="/r", attempt=1, is_chief=True, num_workers=1,
                  checkpoint_dir="/c", resume_from=None, python_path=[])
    env = child_env(base={feed.SOCKET_ENV: "/stale"}, data_socket="/s/data.sock", datasets=["train", "val"], **common)
    assert env[feed.SOCKET_ENV] == "/s/data.sock" and env[feed.NAMES_ENV] == "train,val"
    env = child_env(base={feed.SOCKET_ENV: "/stale", feed.NAMES_ENV: "train"}, **common)
    assert feed.SOCKET_ENV not in env and feed.NAMES_ENV not in env
