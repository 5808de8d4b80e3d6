"""`ctx.data_service(ds)` / `raytf.data_service(ds)` in a task's process, against TF's servers in this process: the
pipeline read through the service under the attempt's job names, the driver told, what TF cannot serve refused
before anything is registered, and the identity when the run has no service."""

import logging
from types import SimpleNamespace

import pytest

from raytf._core.dataservice import SERVICE_ENV, Service, Unservable
from raytf._task import dataservice

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def service(tf):
    """A dispatcher and a worker of TF's in this process; the service record a task would get."""
    svc = tf.data.experimental.service
    dispatcher = svc.DispatchServer()
    address = dispatcher.target.split("://")[1]
    worker = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=address))
    yield Service(dispatcher=address, processing_mode="distributed_epoch", workers=1, run="r", attempt=2)
    worker.stop()
    dispatcher.stop()


@pytest.fixture
def exported(service, monkeypatch):
    monkeypatch.setenv(SERVICE_ENV, service.to_json())
    monkeypatch.setattr(dataservice, "_calls", {})
    return service


def _sink(role="worker", epoch=0, steps=None):
    events = []
    return SimpleNamespace(role=role, epoch=epoch, cfg=SimpleNamespace(train=SimpleNamespace(steps_per_epoch=steps)),
                           _emit=lambda kind, payload: events.append((kind, payload)), events=events)


def test_without_a_service_the_dataset_is_returned_as_it_is(tf, monkeypatch):
    monkeypatch.delenv(SERVICE_ENV, raising=False)
    ds = tf.data.Dataset.range(3)
    assert dataservice.distribute(ds, _sink()) is ds
    assert dataservice.data_service(ds) is ds  # (a script run outside raytf)


def test_the_pipeline_is_read_through_the_service_under_the_attempts_jobs(tf, exported):
    sink = _sink(epoch=1)
    served = dataservice.distribute(tf.data.Dataset.range(10).map(lambda x: x * 2), sink)
    assert sorted(int(x) for x in served) == [x * 2 for x in range(10)]
    assert sorted(int(x) for x in served) == [x * 2 for x in range(10)]  # a new iteration: the next pass
    dataservice.distribute(tf.data.Dataset.range(2), sink)
    dataservice.distribute(tf.data.Dataset.range(2), evaluator := _sink(role="evaluator"))
    assert sink.events == [("data_service", {"job": "raytf.r.a2.train.e1.0"}),
                           ("data_service", {"job": "raytf.r.a2.train.e1.1"})]
    assert evaluator.events == [("data_service", {"job": "raytf.r.a2.eval.e0.2"})]


@pytest.mark.parametrize(("make", "named"), [
    (lambda tf: tf.data.Dataset.from_generator(lambda: iter(range(3)), output_signature=tf.TensorSpec([], tf.int64)),
     "tf.data.Dataset.from_generator"),
    (lambda tf: tf.data.Dataset.range(3).map(lambda x: tf.py_function(lambda y: y, [x], tf.int64)), "tf.py_function"),
    (lambda tf: tf.data.Dataset.range(3).batch(2).map(lambda x: tf.numpy_function(lambda y: y, [x], tf.int64)),
     "tf.numpy_function"),
])
def test_python_in_the_pipeline_is_refused_before_it_is_registered(tf, exported, make, named):
    sink = _sink()
    with pytest.raises(Unservable, match=f"the pipeline uses {named}, which runs Python code"):
        dataservice.distribute(make(tf), sink)
    assert sink.events == []


def test_not_a_dataset(tf, exported):
    with pytest.raises(TypeError, match=r"ds is a builtins.list, not a tf.data.Dataset"):
        dataservice.distribute([1, 2], _sink())


def test_a_finite_pipeline_with_steps_per_epoch_is_warned_about(tf, exported, caplog):
    with caplog.at_level(logging.WARNING, logger="raytf"):
        dataservice.distribute(tf.data.Dataset.range(4), _sink(steps=8))
        dataservice.distribute(tf.data.Dataset.range(4).repeat(), _sink(steps=8))
    assert [r.getMessage() for r in caplog.records].count(
        "ctx.data_service(ds) with train.steps_per_epoch=8: the dataset is finite, so Keras fit (which keeps one "
        "iterator for all epochs when given steps_per_epoch) runs out after its first pass. Fix: "
        "train.steps_per_epoch=null (each epoch is one pass, every element once), or ds.repeat() before "
        "ctx.data_service(ds) (epochs of steps_per_epoch steps)") == 1
