"""Placement diagnosis, the metrics table and error pickling (pure)."""

import pickle

import pyarrow as pa

from raytf import events as ev
from raytf.errors import TrainingFailedError, WorkerError
from raytf.metrics import MetricsTable
from raytf.plan import shortfall


def test_shortfall_names_missing_resources():
    msg = shortfall([{"CPU": 1, "GPU": 1}] * 2, "STRICT_SPREAD", [{"CPU": 4, "GPU": 1}])
    assert "GPU: 1" in msg and "lacks" in msg


def test_shortfall_strict_spread_needs_distinct_nodes():
    msg = shortfall([{"CPU": 1}] * 3, "STRICT_SPREAD", [{"CPU": 8}, {"CPU": 8}])
    assert "3 distinct nodes" in msg and "has 2" in msg


def test_shortfall_bundle_too_big_for_any_node():
    assert "no single node" in shortfall([{"CPU": 3}], "PACK", [{"CPU": 2}, {"CPU": 2}])


def test_shortfall_strict_pack():
    assert "STRICT_PACK" in shortfall([{"CPU": 2}] * 2, "STRICT_PACK", [{"CPU": 2}, {"CPU": 2}])


def test_shortfall_empty_when_it_fits():
    assert shortfall([{"CPU": 1}] * 2, "PACK", [{"CPU": 2}]) == ""


def test_metrics_table_columns_and_final():
    t = MetricsTable("r")
    t.add(ev.Event(ev.STARTED, "worker", 0, 1, {"replicas": 2}))
    t.add(ev.Event(ev.STEP, "worker", 0, 1, {"epoch": 1, "step": 10, "metrics": {"loss": 2.0}}))
    t.add(ev.Event(ev.EPOCH, "worker", 1, 1, {"epoch": 1, "step": 20, "metrics": {"loss": 1.5, "acc": 0.5}}))
    t.add(ev.Event(ev.EPOCH, "worker", 0, 1, {"epoch": 1, "step": 20, "metrics": {"loss": 1.4, "rank": 9.0}}))
    table = t.to_arrow()
    assert table.num_rows == 3
    assert table.column_names[:8] == ["run", "attempt", "rank", "role", "kind", "epoch", "step", "time"]
    assert set(table.column_names) >= {"loss", "acc", "metric_rank"}
    assert table.schema.field("loss").type == pa.float64()
    assert t.final() == {"loss": 1.4, "metric_rank": 9.0, "epoch": 1, "step": 20}
    again = MetricsTable("r", previous=table)
    assert again.to_arrow().num_rows == 3


def test_errors_pickle_with_rank_and_traceback():
    err = WorkerError("ValueError: bad", role="worker", rank=1, node_id="abc", remote_traceback="Traceback...")
    back = pickle.loads(pickle.dumps(err))
    assert (back.role, back.rank, back.node_id, back.remote_traceback) == ("worker", 1, "abc", "Traceback...")
    assert str(back) == "worker 1 on node abc: ValueError: bad"
    tfe = pickle.loads(pickle.dumps(TrainingFailedError("failed", {("worker", 1): err})))
    assert tfe.failures[("worker", 1)].rank == 1


def test_event_buffer_drain_waits_and_returns_in_order():
    import threading

    buf = ev.EventBuffer()
    assert buf.drain(0) == []
    e1, e2 = ev.Event(ev.STEP, "worker", 0, 1), ev.Event(ev.STEP, "worker", 1, 1)
    threading.Timer(0.05, buf.push, args=([e1, e2],)).start()
    assert buf.drain(5.0) == [e1, e2]
