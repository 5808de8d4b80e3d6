"""Placement diagnosis, the metrics table and error pickling (pure)."""

import pickle

import pyarrow as pa
import pytest

from raytf._core import events as ev
from raytf._core.attempt_record import Attempt
from raytf._core.checkpoints import checkpoint_name
from raytf._core.metrics import MetricsTable
from raytf._core.plan import AUTOSCALER_EVENT, busy, never_request, shortfall, spare_nodes, unmet_bundle
from raytf.errors import TrainingFailedError, WorkerError

# A line of the v1 autoscaler's log as Ray 2.60 sends it to drivers (seen on Ray's fake multi-node cluster).
V1_EVENT = ("2026-12-01 19:43:06,520\tINFO monitor.py:438 -- :event_summary:Error: No available node types can "
            "fulfill resource request {'GPU': 1.0, 'CPU': 1.0}. Add suitable node types to this cluster to resolve "
            "this issue.")


def test_the_v1_autoscalers_never_is_read_from_its_event_line():
    assert AUTOSCALER_EVENT in V1_EVENT  # (Ray's own marker: tests/ray/test_private_api_fallbacks.py checks it)
    assert never_request(V1_EVENT) == {"GPU": 1.0, "CPU": 1.0}
    for other in (V1_EVENT.replace(":event_summary:", ""),  # a worker's output quoting it: not the autoscaler's
                  "... :event_summary:Adding 1 node(s) of type cpu2.",
                  "... :event_summary:Warning: The following resource request cannot be scheduled right now: "
                  "{'CPU': 1.0}.",
                  V1_EVENT.replace("{'GPU': 1.0, 'CPU': 1.0}", "{'GPU': os.system('x')}")):
        assert never_request(other) is None, other


def test_a_never_request_is_matched_to_the_groups_bundles_by_resources():
    gpu = {"GPU": 1.0, "CPU": 1.0}
    assert unmet_bundle(gpu, [{"CPU": 1, "GPU": 1}] * 2, "PACK") == {"CPU": 1, "GPU": 1}
    assert unmet_bundle(gpu, [{"CPU": 1, "GPU": 1, "memory": 0}], "SPREAD") is not None  # (zeros: not asked for)
    assert unmet_bundle(gpu, [{"CPU": 1}] * 2, "PACK") is None  # another driver's request
    assert unmet_bundle(gpu, [{"CPU": 1, "GPU": 1}] * 2, "STRICT_PACK") is None  # v1 asks for the group's total
    assert unmet_bundle({"CPU": 2.0, "GPU": 2.0}, [{"CPU": 1, "GPU": 1}] * 2, "STRICT_PACK") == {"CPU": 2, "GPU": 2}


def test_a_strict_pack_groups_total_is_read_as_v1_prints_it():
    from collections import defaultdict

    total = defaultdict(float, {"CPU": 2.0, "GPU": 2.0})  # (how Ray 2.60's v1 sums a STRICT_PACK group's bundles)
    line = V1_EVENT.replace("{'GPU': 1.0, 'CPU': 1.0}", f"{total}")
    assert "defaultdict(<class 'float'>, {" in line
    assert never_request(line) == {"CPU": 2.0, "GPU": 2.0}


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


def test_spare_nodes_for_a_drained_nodes_tasks_are_others_that_can_hold_them():
    nodes = {"head": {"CPU": 0.0}, "a": {"CPU": 1.0}, "b": {"CPU": 4.0, "GPU": 1.0}, "c": {"CPU": 2.0},
             "d": {"CPU": 1.0}}
    # One node each, never one avoided (the group's own, the draining), none too small (the head's 0 CPUs).
    assert spare_nodes([{"CPU": 1}, {"CPU": 1}], nodes, avoid={"a"}) == ["b", "c"]
    assert spare_nodes([{"CPU": 1, "GPU": 1}], nodes, avoid=set()) == ["b"]
    assert spare_nodes([{"CPU": 2}] * 3, nodes, avoid={"b"}) == ["c"]  # fewer than asked: what there is
    assert spare_nodes([{"CPU": 1}], {"head": {"CPU": 0.0}}, avoid=set()) == []


def test_shortfall_empty_when_it_fits():
    assert shortfall([{"CPU": 1}] * 2, "PACK", [{"CPU": 2}]) == ""


def test_a_busy_cluster_names_what_is_free_and_who_holds_the_rest_never_rays_own_resource_names():
    # What Ray's available_resources() holds while another run's placement group is up (Ray 2.60, embedded).
    free = {"CPU": 1.0, "memory": 5.5e9, "node:127.0.0.1": 1.0, "node:__internal_head__": 1.0,
            "bundle_group_0_a4edf0": 999.999, "CPU_group_a4edf0": 0.0, "object_store_memory": 2e9}
    holders = [("raytf:first", {"CPU": 2.0, "bundle_group_0_a4edf0": 1000.0}), ("", {"CPU": 0.5}), ("", {"CPU": 0.5}),
               ("other-job", {"GPU": 1.0})]  # (holds nothing this request needs: not named)
    msg = busy({"CPU": 3.0}, free, holders)
    assert msg == ("the cluster could hold it but has only {CPU: 1} of the {CPU: 3} it needs free now, held by "
                   "placement groups: raytf:first {CPU: 2}, 2 unnamed placement group(s) {CPU: 1}")
    for internal in ("bundle_group", "_group_", "node:", "memory", "other-job"):
        assert internal not in msg
    # Nothing in a placement group: what holds it is outside them.
    assert busy({"CPU": 2.0}, {}, []).endswith(
        "has only {CPU: 0} of the {CPU: 2} it needs free now, held by tasks and actors outside placement groups "
        "(other jobs)")
    # Who holds what not known (Ray's table changed): what is free, and no guess.
    assert busy({"CPU": 2.0}, {"CPU": 1.0}, None) == (
        "the cluster could hold it but has only {CPU: 1} of the {CPU: 2} it needs free now")


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


def test_woken_drains_return_at_once_and_none_waits_after():
    """The attempt's last drains (RayPort.rest): a drain waiting for its first event returns when woken, with what
    there is, and a drain that starts after the wake (a threaded actor's calls keep no order) does not wait at all."""
    import threading
    import time

    buf = ev.EventBuffer()
    out: list = []
    waiting = threading.Thread(target=lambda: out.append(buf.drain(30.0)))
    t0 = time.monotonic()
    waiting.start()
    # Until the drain is inside its wait (then the wake's notify is the one it gets; before, the sticky flag alone
    # would let it return), bounded: a drain that never waits fails below, not here.
    while not buf._cond._waiters and waiting.is_alive() and time.monotonic() - t0 < 10:
        time.sleep(0.001)
    assert buf._cond._waiters, "the drain never waited for its first event"
    buf.wake_drains()
    waiting.join(30)
    assert out == [[]] and time.monotonic() - t0 < 10
    e = ev.Event(ev.STEP, "worker", 0, 1)
    t1 = time.monotonic()
    assert buf.drain(30.0) == []  # woken for good: no wait
    buf.push([e])
    assert buf.drain(30.0) == [e]
    assert time.monotonic() - t1 < 10


def test_attempt_observes_progress_and_accounts_loss():
    previous = Attempt(1, 1, ended=100.0)
    a = Attempt(2, 2, resumed_from="ckpt")
    # Another attempt's events and non-progress events do not count.
    assert a.observe(ev.Event(ev.STEP, "worker", 0, 1, {"step": 99}, time=101.0), previous) is None
    assert a.observe(ev.Event(ev.STARTED, "worker", 0, 2, {"replicas": 2}, time=101.0), previous) is None
    # A heartbeat is progress for the step count, but not the first training step.
    a.observe(ev.Event(ev.HEARTBEAT, "worker", 0, 2, {"epoch": 1, "step": 3}, time=102.0), previous)
    assert a.first_step_at is None and a.last_step == 3
    a.observe(ev.Event(ev.STEP, "worker", 1, 2, {"epoch": 1, "step": 10}, time=104.5), previous)
    assert a.first_step_at == 104.5 and a.recovery_s == 4.5
    name = a.observe(ev.Event(ev.CHECKPOINT, "worker", 0, 2, {"epoch": 1, "step": 20}, time=106.0), previous)
    assert name == checkpoint_name(1, 20) and a.last_commit_at == 106.0
    a.observe(ev.Event(ev.STEP, "worker", 0, 2, {"epoch": 2, "step": 27}, time=107.0), previous)
    a.observe(ev.Event(ev.STEP, "worker", 1, 2, {"epoch": 2, "step": 25}, time=107.1), previous)
    assert a.last_step == 27  # the furthest rank, not the last report
    a.ended = 108.0
    a.account_loss(resume_step=20)
    assert a.steps_lost == 7 and a.time_lost_s == 2.0
    out = a.to_json()
    assert out["attempt"] == 2 and out["duration_s"] == round(108.0 - a.started, 3)


def test_training_failed_error_json_names_the_root_cause():
    root = WorkerError("boom", role="worker", rank=1, node_id="n1", remote_traceback="Traceback...\nboom",
                       kind="user")
    other = WorkerError("peer gone", role="worker", rank=0, kind="system")
    out = TrainingFailedError("run r failed: boom", {("worker", 1): root, ("worker", 0): other}).to_json()
    assert out == {"message": "run r failed: boom", "role": "worker", "rank": 1, "node_id": "n1",
                   "kind": "user", "traceback": "Traceback...\nboom"}
    assert TrainingFailedError("interrupted").to_json() == {"message": "interrupted"}


def test_metrics_flush_in_parts_then_compact_without_losing_or_doubling_rows(tmp_path):
    from raytf._storage import METRICS_FILE, METRICS_PARTS_DIR, RunDir

    rd = RunDir(str(tmp_path), "r")
    rd.makedirs()
    t = MetricsTable("r")
    t.add(ev.Event(ev.STEP, "worker", 0, 1, {"epoch": 1, "step": 1, "metrics": {"loss": 2.0}}, time=1.0))
    rd.metrics.append(t.take_new(), "launch-000001")
    # A new metric column in the second part; and a row that reached the bus late (earlier time).
    t.add(ev.Event(ev.EPOCH, "worker", 0, 1, {"epoch": 1, "step": 2, "metrics": {"acc": 0.5}}, time=3.0))
    t.add(ev.Event(ev.STEP, "worker", 1, 1, {"epoch": 1, "step": 2, "metrics": {"loss": 1.0}}, time=2.0))
    rd.metrics.append(t.take_new(), "launch-000002")
    assert not t.dirty and len(t) == 3
    live = rd.metrics.read()  # a reader while the run goes: the parts
    assert live.column("time").to_pylist() == [1.0, 2.0, 3.0] and live.column("acc").to_pylist() == [None, None, 0.5]
    rd.metrics.write(t.to_arrow())  # the run's end: one file, the parts gone
    assert not (tmp_path / "r" / METRICS_PARTS_DIR).exists() or not list((tmp_path / "r" / METRICS_PARTS_DIR).iterdir())
    assert rd.metrics.read().to_pylist() == live.to_pylist()
    # A driver that died between the compaction and the parts' removal: metrics.parquet names them, no doubles.
    rd.metrics.append(live.slice(0, 1), "launch-000001")
    assert rd.metrics.read().num_rows == 3
    assert (tmp_path / "r" / METRICS_FILE).exists()
    resumed = MetricsTable("r", previous=rd.metrics.read())
    assert resumed.final() == {"acc": 0.5, "epoch": 1, "step": 2}


def test_metrics_table_lets_stored_rows_go_and_reads_them_back(tmp_path):
    """A run that reports every step for days: what storage has leaves memory past the bound; the whole table is
    the same, with the earlier launch's rows, a part whose write failed and the rows not yet flushed."""
    from raytf._storage import RunDir

    rd = RunDir(str(tmp_path), "r")
    rd.makedirs()
    earlier = MetricsTable("r")
    earlier.add(ev.Event(ev.EPOCH, "worker", 0, 1, {"epoch": 1, "step": 5, "metrics": {"loss": 3.0}}, time=0.5))
    rd.metrics.write(earlier.to_arrow())
    failed: set[str] = set()
    reads = []

    def read_stored():
        reads.append(1)
        return rd.metrics.read(skip=failed)

    t = MetricsTable("r", previous=rd.metrics.read(), read_stored=read_stored, memory_bytes=4096)
    step, parts = 0, 0
    for _ in range(40):  # 40 flushes of 20 rows each, ~2 KB a part
        for rank in range(2):
            for _ in range(10):
                step += 1
                t.add(ev.Event(ev.STEP, "worker", rank, 2, {"epoch": 2, "step": step, "metrics": {"loss": 1.0}},
                               time=1.0 + step))
        parts += 1
        table = t.take_new()
        if parts == 7:  # a part whose write raised after its file landed: its rows only count from memory
            rd.metrics.append(table, f"l-{parts:06d}")
            failed.add(f"l-{parts:06d}.parquet")
            continue
        rd.metrics.append(table, f"l-{parts:06d}")
        t.stored(table)
    t.add(ev.Event(ev.STEP, "worker", 1, 2, {"epoch": 2, "step": step + 1, "metrics": {"acc": 0.5}}, time=9e3))
    held = sum(x.nbytes for x, _ in t._tables)
    assert held < 3 * 4096, held  # bounded: the bound plus the failed part, not the 40 parts
    assert len(t) == 1 + 40 * 20 + 1 and not reads
    whole = t.to_arrow()
    assert len(reads) == 1 and whole.num_rows == len(t)
    assert whole.column("time").to_pylist() == sorted(whole.column("time").to_pylist())
    assert whole.column("step").to_pylist()[:3] == [5, 1, 2] and whole.column("acc").to_pylist()[-1] == 0.5
    assert t.to_arrow() is whole and len(reads) == 1  # asked again at the run's end: not read again
    rd.metrics.write(whole)  # the run's end: then everything is stored, and memory keeps at most the bound
    t.all_stored()
    assert sum(x.nbytes for x, _ in t._tables) <= 4096
    assert rd.metrics.read().num_rows == len(t) == whole.num_rows
    assert t.final() == {"loss": 3.0, "epoch": 1, "step": 5}  # the earlier launch's epoch row, though spilled
    unbounded = MetricsTable("r")  # no reader: everything stays (the pure tests' and benchmarks' use)
    unbounded.add(ev.Event(ev.STEP, "worker", 0, 1, {"epoch": 1, "step": 1}))
    unbounded.stored(unbounded.take_new())
    assert unbounded.to_arrow().num_rows == 1


def test_attempt_knows_when_training_finished():
    def epoch(a, n, rank=0):
        a.observe(ev.Event(ev.EPOCH, "worker", rank, 1, {"epoch": n, "step": 10 * n}))

    fn = Attempt(1, 1, epoch_target=3)  # a training function: train.epochs
    epoch(fn, 2)
    epoch(fn, 3, rank=1)  # another rank's count does not decide
    assert not fn.training_finished
    epoch(fn, 3)
    assert fn.training_finished
    script = Attempt(1, 1)  # a script: its Model.fit says how many epochs
    epoch(script, 5)
    assert not script.training_finished  # no fit seen: unknown
    script.observe(ev.Event(ev.STARTED, "worker", 0, 1, {"replicas": 2, "epochs": 2, "fit": 1, "base_epoch": 0}))
    epoch(script, 2)
    assert script.training_finished
    # A second fit of two more epochs (counting on from 2): not finished until epoch 4.
    script.observe(ev.Event(ev.STARTED, "worker", 0, 1, {"replicas": 2, "epochs": 2, "fit": 2, "base_epoch": 2}))
    assert not script.training_finished
    epoch(script, 3)
    assert not script.training_finished
    epoch(script, 4)
    assert script.training_finished and script.to_json()["training_finished"] is True


def test_checkpoint_events_name_the_lineage_number():
    a = Attempt(1, 1)
    name = a.observe(ev.Event(ev.CHECKPOINT, "worker", 0, 1, {"epoch": 1, "step": 20, "seq": 7}))
    assert name == checkpoint_name(1, 20, 7)


def test_metrics_rows_keep_their_fit_and_curves_take_the_last_fit():
    from raytf._driver.figures import learning_curves

    table = MetricsTable("r")
    for fit, loss in ((1, 0.9), (2, 0.1)):  # the same epoch number from two fits of one attempt
        for rank in (0, 1):
            table.add(ev.Event(ev.EPOCH, "worker", rank, 1, {"epoch": 1, "step": 10, "fit": fit,
                                                              "metrics": {"loss": loss}}))
    t = table.to_arrow()
    assert t.column("fit").to_pylist() == [1, 1, 2, 2]
    assert learning_curves(t)["loss"].tolist() == [0.1]


def test_metrics_rows_carry_their_attempts_size():
    """Elastic training: the driver tells the table each attempt's workers (set_size) and every row of that
    attempt carries it, also rows that came before the call and late rows of an earlier attempt; a previous
    launch's rows without the column stay null."""
    previous = MetricsTable("r")
    previous.add(ev.Event(ev.EPOCH, "worker", 0, 1, {"epoch": 1, "step": 10, "metrics": {"loss": 2.0}}, time=0.0))
    old = previous.to_arrow().drop_columns(["num_workers"])  # written by a raytf without the column
    table = MetricsTable("r", previous=old)
    table.set_size(2, 3)
    table.add(ev.Event(ev.STEP, "worker", 0, 2, {"epoch": 2, "step": 11, "metrics": {"loss": 1.9}}, time=1.0))
    table.add(ev.Event(ev.STEP, "worker", 0, 3, {"epoch": 2, "step": 15, "metrics": {"loss": 1.5}}, time=2.0))
    table.take_new()  # a flush: attempt 3's row was taken before its size was known (the driver sets it first)
    table.add(ev.Event(ev.EPOCH, "worker", 1, 3, {"epoch": 2, "step": 20, "metrics": {"loss": 1.4}}, time=3.0))
    table.set_size(3, 2)
    table.add(ev.Event(ev.STEP, "worker", 1, 2, {"epoch": 2, "step": 12, "metrics": {"loss": 1.8}}, time=4.0))
    t = table.to_arrow()
    assert t.schema.field("num_workers").type == pa.int64()
    assert list(zip(t.column("attempt").to_pylist(), t.column("num_workers").to_pylist())) == [
        (1, None), (2, 3), (3, None), (3, 2), (2, 3)]
    assert "num_workers" not in table.final()  # a column of the table, not a metric
    table.add(ev.Event(ev.STEP, "worker", 0, 3, {"epoch": 3, "step": 21, "metrics": {"num_workers": 7.0}}, time=5.0))
    assert table.to_arrow().column("metric_num_workers").to_pylist()[-1] == 7.0  # a metric of that name


def test_metrics_table_of_512_ranks():
    """512 ranks' step rows, flushed in parts as the driver does, read back whole: every rank's row and its own
    final metrics; the per-rank breakdown has one row per rank (issue 38: the table at the large end)."""
    from raytf._driver.ranks import rank_breakdown

    t = MetricsTable("r")
    for step in range(1, 21):
        for rank in range(512):
            t.add(ev.Event(ev.STEP, "worker", rank, 1, {"epoch": 1 + (step - 1) // 10, "step": step, "metrics": {
                "loss": 1.0 / step, "step_time_s": 0.1 + rank * 1e-4, "input_wait_s": 0.01}}, time=float(step)))
        if step % 10 == 0:
            for rank in range(512):
                t.add(ev.Event(ev.EPOCH, "worker", rank, 1, {"epoch": step // 10, "step": step,
                                                             "metrics": {"loss": float(rank)}}, time=step + 0.5))
            assert t.take_new().num_rows == 512 * 11
    table = t.to_arrow()
    assert table.num_rows == 512 * 22 and len(t) == 512 * 22
    assert t.final(7) == {"loss": 7.0, "epoch": 2, "step": 20}
    rb = rank_breakdown(table)
    assert list(rb["rank"]) == list(range(512))
    assert rb["step_time_s"].iloc[511] == pytest.approx(0.1 + 511e-4)


def test_a_launch_that_does_not_resume_starts_the_metrics_table_afresh(tmp_path):
    """Resume.earlier: with checkpoint.resume=false, an earlier launch's rows (no checkpoint continues them) go before
    the run starts, so the table's read-back cannot pick them up; with resume, they are the launch's `table`; a
    second lineage refused leaves them alone."""
    import raytf
    from raytf._driver.resume import Resume
    from raytf._storage import RunDir
    from raytf.errors import ConfigError
    from tests.conftest import ROOT

    def launch(resume: bool):
        cfg = raytf.load_config(ROOT / "conf/local.yaml", [f"storage.path={tmp_path}", "run.name=r",
                                                           f"checkpoint.resume={resume}"])
        return Resume(cfg, RunDir(str(tmp_path), "r"))

    earlier = MetricsTable("r")
    earlier.add(ev.Event(ev.EPOCH, "worker", 0, 1, {"epoch": 1, "step": 5, "metrics": {"loss": 3.0}}, time=0.5))
    rd = RunDir(str(tmp_path), "r")
    rd.makedirs()
    rd.metrics.write(earlier.to_arrow())
    _, table, _ = launch(True).earlier()
    assert table.num_rows == 1 and rd.metrics.exists()
    _, table, _ = launch(False).earlier()
    assert table is None and not rd.metrics.exists()
    rd.metrics.write(earlier.to_arrow())
    committed = tmp_path / "r" / "checkpoints" / checkpoint_name(1, 5)
    committed.mkdir(parents=True)
    (committed / "_COMMITTED.json").write_text('{"epoch": 1, "step": 5}')
    with pytest.raises(ConfigError, match=r"checkpoint\.resume=false"):
        launch(False).earlier()
    assert rd.metrics.exists()


def test_final_metrics_of_a_run_without_epochs_are_its_last_step_row():
    """A custom loop reporting steps only, a script's tf.summary scalars (raytf issue 55): the last step row, rank 0's
    first; the earlier launch's too. Once an epoch row arrives, epoch rows decide as before."""
    t = MetricsTable("r")
    t.add(ev.Event(ev.STEP, "worker", 1, 1, {"epoch": 1, "step": 30, "metrics": {"train/loss": 0.3}}))
    assert t.final() == {"train/loss": 0.3, "epoch": 1, "step": 30}  # (no row of rank 0 yet: any rank's newest)
    for step, loss in ((10, 1.0), (20, 0.5)):
        t.add(ev.Event(ev.STEP, "worker", 0, 1, {"epoch": 1, "step": step, "metrics": {"train/loss": loss}}))
    assert t.final() == {"train/loss": 0.5, "epoch": 1, "step": 20}
    assert MetricsTable("r", previous=t.to_arrow()).final() == {"train/loss": 0.5, "epoch": 1, "step": 20}
    t.add(ev.Event(ev.EPOCH, "worker", 0, 1, {"epoch": 1, "step": 20, "metrics": {"acc": 0.9}}))
    t.add(ev.Event(ev.STEP, "worker", 0, 1, {"epoch": 2, "step": 25, "metrics": {"train/loss": 0.1}}))
    assert t.final() == {"acc": 0.9, "epoch": 1, "step": 20}
