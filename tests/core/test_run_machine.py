"""The run level as a state machine (raytf/_core/run_machine.py): an attempt's end in, the next state out: retry,
give up, shrink, grow, succeed; the failure budget (failures, preemptions, resizes counted apart); a task lost after the
last epoch once the final checkpoint is committed. Pure: no Ray, milliseconds."""

import logging

import pytest

from raytf._core import elastic, failure
from raytf._core import events as ev
from raytf._core.attempt_record import (
    FAILED,
    INTERRUPTED,
    SUCCEEDED,
    Cause,
    Done,
    Drain,
    Failed,
    Hung,
    Interrupted,
    Recycle,
    Stopped,
)
from raytf._core.budget import FailureBudget
from raytf._core.checkpoints import CheckpointEntry, checkpoint_name
from raytf._core.run_machine import ACCEPT, Run
from raytf._core.run_states import AttemptEnd, Ended, Grow, InvalidTransition, Placing, Retrying, Training
from raytf.config import load_config
from raytf.errors import PlacementError, WorkerError


def cfg(*overrides):
    return load_config("conf/local.yaml", ["train.epochs=3", *overrides])


def entry(epoch: int, step: int, seq: int = 1) -> CheckpointEntry:
    return CheckpointEntry(epoch, step, checkpoint_name(epoch, step, seq), committed=True, seq=seq)


def died(rank: int = 1, kind: str = failure.SYSTEM, error_type: str = "") -> WorkerError:
    return WorkerError("the task's actor died", role="worker", rank=rank, node_id=f"node{rank}", kind=kind,
                       error_type=error_type)


def failed(*errors: WorkerError, **kw) -> AttemptEnd:
    return AttemptEnd(Failed(errors), errors, **kw)


def train(run: Run, size: int | None = None, *, epochs: int = 1, now: float = 10.0) -> Training:
    """The current attempt placed, then trained `epochs` epochs as rank 0 reports them."""
    placing = run.state
    assert isinstance(placing, Placing)
    state = run.placed(size or placing.tries[0].size, now)
    attempt = state.attempt
    for epoch in range(1, epochs + 1):
        attempt.observe(ev.Event(ev.EPOCH, "worker", 0, attempt.number, {"epoch": epoch, "step": 10 * epoch},
                                 time=now + epoch))
    return state


def test_a_done_attempt_ends_the_run_succeeded():
    run = Run(cfg())
    run.begin(None)
    train(run, epochs=3)
    state = run.ended(AttemptEnd(Done()), latest=None, now=20.0)
    assert state == Ended(SUCCEEDED) and run.attempt.status == SUCCEEDED and run.error is None


def test_a_failure_is_retried_from_the_checkpoint_chosen_until_max_failures():
    run = Run(cfg("failure.max_failures=1"))
    run.begin(None)
    train(run)
    state = run.ended(failed(died()), latest=entry(1, 10), now=20.0)
    assert isinstance(state, Retrying) and state.verdict.decision is failure.Decision.RETRY
    a1 = run.attempt
    assert (a1.status, a1.cause, a1.rank, a1.decision, a1.steps_lost) == (FAILED, failure.SYSTEM, 1, "retry", 0)
    placing = run.resumed(entry(1, 10))
    assert isinstance(placing, Placing) and placing.attempt.number == 2 and placing.attempt.resumed_from == \
        entry(1, 10).name and run.resumed_from == entry(1, 10)
    train(run)
    state = run.ended(failed(died()), latest=entry(1, 10), now=40.0)
    assert isinstance(state, Ended) and state.status == FAILED
    assert "failure.max_failures (1) reached" in run.attempt.reason and run.error is state.error
    assert run.budget.failures == 1 and "worker 1" in str(run.error)


def test_the_root_cause_is_the_death_not_its_peers_errors():
    run = Run(cfg())
    run.begin(None)
    train(run)
    run.ended(failed(died(0, failure.PEER, "UnavailableError"), died(1)), latest=None, now=20.0)
    assert (run.attempt.cause, run.attempt.rank) == (failure.SYSTEM, 1)


def test_a_bug_is_never_retried():
    run = Run(cfg("failure.max_failures=-1"))
    run.begin(None)
    train(run)
    state = run.ended(failed(died(0, failure.USER, "NameError")), latest=None, now=20.0)
    assert state.status == FAILED and "NameError is a bug" in run.attempt.reason


def test_preemptions_have_a_budget_of_their_own():
    run = Run(cfg("failure.max_failures=0", "failure.max_preemptions=1"))
    run.begin(None)
    preempted = WorkerError("preempted (SIGTERM) at step 7; saved before stopping", role="worker", rank=1,
                            kind=failure.PREEMPTED)
    stopped = AttemptEnd(Stopped(Cause.PREEMPTED, saved=True), (preempted,))
    train(run)
    assert isinstance(run.ended(stopped, latest=entry(1, 8), now=20.0), Retrying)  # max_failures=0: not counted
    assert run.budget.to_json() == {"failures": 0, "max_failures": 0, "preemptions": 1, "max_preemptions": 1,
                                    "resizes": 0, "max_resizes": 10, "recycles": 0}
    run.resumed(entry(1, 8))
    train(run)
    state = run.ended(stopped, latest=entry(1, 8), now=40.0)
    assert state.status == FAILED and run.attempt.reason == "failure.max_preemptions (1) reached"
    unlimited = Run(cfg("failure.max_failures=0"))  # the default, -1: as many as come
    unlimited.begin(None)
    for i in range(5):
        train(unlimited)
        assert isinstance(unlimited.ended(stopped, latest=entry(1, 8), now=20.0 + i), Retrying)
        unlimited.resumed(entry(1, 8))


def test_a_drain_is_a_preemption_recorded_with_its_node_deadline_and_save():
    run = Run(cfg("failure.max_failures=0", "failure.max_preemptions=1"))
    run.begin(None)
    attempt = train(run, epochs=1).attempt  # (its epoch 1 ends at step 10, t=11)
    drain = Drain("node1", (1,), deadline=40.0, seen_at=12.0)
    attempt.observe(ev.Event(ev.STEP, "worker", 0, attempt.number, {"step": 12, "epoch": 2}, time=12.5))
    attempt.observe(ev.Event(ev.CHECKPOINT, "worker", 0, attempt.number,
                             {"uri": "u", "epoch": 2, "step": 13, "seq": 1}, time=15.0))
    error = WorkerError("node node1 is being drained", role="worker", rank=1, node_id="node1", kind=failure.DRAIN)
    state = run.ended(AttemptEnd(Stopped(Cause.DRAIN, saved=True, drain=drain), (error,)), latest=entry(2, 13),
                      now=16.0)
    assert isinstance(state, Retrying)  # max_failures=0: a drain is not counted there
    assert (attempt.cause, attempt.rank, attempt.node_id, attempt.steps_lost) == ("drain", 1, "node1", 0)
    assert attempt.drain == {"node": "node1", "ranks": [1], "deadline_at": 40.0, "seen_at": 12.0, "saved": True,
                             "save_after_notice_s": 3.0, "save_before_deadline_s": 25.0}
    assert run.budget.preemptions == 1 and run.budget.failures == 0
    run.resumed(entry(2, 13))
    train(run)
    state = run.ended(AttemptEnd(Stopped(Cause.DRAIN, saved=False, drain=drain), (error,)), latest=entry(2, 13),
                      now=30.0)
    assert state.status == FAILED and run.attempt.reason == "failure.max_preemptions (1) reached"
    assert run.attempt.drain["saved"] is False and "save_before_deadline_s" not in run.attempt.drain


def test_a_recycle_is_retried_apart_from_failures_and_preemptions_and_recorded(caplog):
    run = Run(cfg("failure.max_failures=0", "failure.max_preemptions=0"))
    run.begin(None)
    attempt = train(run, epochs=1).attempt
    recycle = Recycle(1, "worker", rss_gib=3.5, limit_gib=3.0, start_gib=1.0, step=12, seen_at=12.0)
    error = WorkerError("uses 3.50 GiB of memory", role="worker", rank=1, kind=failure.RECYCLE)
    with caplog.at_level(logging.WARNING, logger="raytf"):
        state = run.ended(AttemptEnd(Stopped(Cause.RECYCLE, saved=True, recycle=recycle), (error,)),
                          latest=entry(2, 13), now=16.0)
    assert isinstance(state, Retrying)  # max_failures=0, max_preemptions=0: counted in neither
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # (not a failure: no error line)
    assert attempt.cause == "recycle" and attempt.decision == "retry"
    assert attempt.recycle == {"rank": 1, "role": "worker", "rss_gib": 3.5, "limit_gib": 3.0, "start_gib": 1.0,
                               "step": 12, "seen_at": 12.0, "saved": True}
    assert run.budget.to_json()["recycles"] == 1 and run.budget.failures == run.budget.preemptions == 0


def test_a_task_lost_after_the_last_epoch_with_the_final_checkpoint_committed_is_a_success(caplog):
    run = Run(cfg())
    run.begin(None)
    train(run, epochs=3)
    with caplog.at_level(logging.WARNING, logger="raytf"):
        state = run.ended(failed(died(1), died(0, failure.PEER, "UnavailableError")), latest=entry(3, 30), now=20.0)
    assert state == Ended(SUCCEEDED) and run.error is None
    a = run.attempt
    assert (a.status, a.cause, a.rank, a.role, a.decision) == (SUCCEEDED, failure.SYSTEM, 1, "worker", ACCEPT)
    assert entry(3, 30).name in a.reason and "the run succeeded" in a.reason
    assert run.lost_tasks == [{"role": "worker", "rank": 1, "attempt": 1, "time": 20.0,
                               "cause": "the task's actor died"}]
    assert "was lost after training finished" in caplog.text
    assert [r.levelname for r in caplog.records] == ["WARNING"]  # one line: the run succeeded


@pytest.mark.parametrize(("error", "latest"), [
    (died(1), entry(2, 20)),  # the final checkpoint was not committed: its training would be lost
    (died(1), None),  # checkpoints off
    (died(0, failure.USER, "ValueError"), entry(3, 30)),  # the program's own code raised after training
])
def test_a_failure_after_the_last_epoch_otherwise_fails_the_run(error, latest):
    run = Run(cfg())
    run.begin(None)
    train(run, epochs=3)
    state = run.ended(failed(error), latest=latest, now=20.0)
    assert state.status == FAILED and "training had finished its last epoch" in run.attempt.reason
    assert run.lost_tasks == []


def test_a_hang_is_a_failure_like_any_other():
    run = Run(cfg())
    run.begin(None)
    train(run)
    hang = WorkerError("no progress for 300s (failure.hang_timeout_s); stacks in x", role="worker", rank=1,
                       kind=failure.HANG)
    assert isinstance(run.ended(AttemptEnd(Hung((1,)), (hang,)), latest=None, now=20.0), Retrying)
    assert run.attempt.cause == failure.HANG and run.budget.failures == 1


def test_the_next_attempt_keeps_off_the_nodes_left_unreachable():
    run = Run(cfg())
    run.begin(None)
    train(run)
    run.ended(failed(died(), unreachable=frozenset({"node1"})), latest=None, now=20.0)
    assert run.resumed(None).avoid == frozenset({"node1"})
    train(run)
    run.ended(failed(died()), latest=None, now=30.0)
    assert run.resumed(None).avoid == frozenset()


def test_ctrl_c_placement_storage_and_a_lost_head_end_the_run():
    run = Run(cfg())
    run.begin(None)
    train(run)
    state = run.ended(AttemptEnd(Interrupted(saved=True)), latest=None, now=20.0)
    assert state.status == INTERRUPTED and (run.attempt.status, run.attempt.cause) == (INTERRUPTED, "interrupted")
    run = Run(cfg())
    run.begin(None)
    state = run.aborted(PlacementError("placement group for 2 tasks not ready"), now=5.0)
    assert state.status == FAILED and run.attempt.cause == "PlacementError" and "not ready" in str(run.error)
    run = Run(cfg())
    run.begin(None)
    train(run)
    assert run.head_lost("lost the head", now=15.0).status == FAILED and run.attempt.cause == failure.HEAD_LOST
    run = Run(cfg())
    run.begin(None)
    train(run)
    run.trained()  # its loop ended Done; the teardown was under way
    assert run.head_lost("lost the head", now=15.0) == Ended(SUCCEEDED)


def test_every_change_of_state_is_one_the_table_has():
    """An input given in a state that cannot take it is refused before anything changes (the caller's bug); the
    second of two verdicts that race (the head watch's, the main thread's) leaves the first standing."""
    run = Run(cfg())
    with pytest.raises(InvalidTransition, match="expected Placing, in no state"):
        run.placed(2, now=1.0)
    run.begin(None)
    with pytest.raises(InvalidTransition, match="expected Training, in Placing"):
        run.ended(AttemptEnd(Done()), latest=None, now=2.0)
    with pytest.raises(InvalidTransition, match="expected Retrying, in Placing"):
        run.resumed(None)
    with pytest.raises(InvalidTransition, match="expected Training, in Placing"):
        run.trained()
    assert isinstance(run.state, Placing)  # (unchanged)
    train(run)
    with pytest.raises(InvalidTransition, match="expected Placing, in Training"):
        run.placed(2, now=12.0)
    interrupted = run.interrupted(now=13.0)
    assert interrupted.status == INTERRUPTED
    assert run.head_lost("lost the head", now=14.0) is interrupted and run.broke(RuntimeError("x"), 15.0) is interrupted
    with pytest.raises(InvalidTransition, match="Ended -> Placing is not a transition"):
        run.begin(None)


def test_the_drivers_own_error_is_retried_within_max_failures_with_its_traceback():
    """raytf's driver raising while an attempt ran (a Ray call it made, a bug) is the attempt's failure, kind
    `driver`: retried like a lost task within failure.max_failures, its traceback kept in the attempt's record."""
    run = Run(cfg("failure.max_failures=1"))
    run.begin(None)
    train(run)
    bug = WorkerError("raytf's driver failed: RayError: the GCS did not answer", role="driver", kind=failure.DRIVER,
                      remote_traceback="Traceback (most recent call last):\n  ...\nRayError: the GCS did not answer",
                      error_type="RayError")
    state = run.ended(AttemptEnd(Failed((bug,)), (bug,)), latest=entry(1, 10), now=20.0)
    assert isinstance(state, Retrying) and run.budget.failures == 1
    a1 = run.attempt.to_json()
    assert (a1["cause"], a1["role"], a1["error_type"], a1["decision"]) == ("driver", "driver", "RayError", "retry")
    assert a1["traceback"].endswith("RayError: the GCS did not answer")
    run.resumed(entry(1, 10))
    train(run)
    state = run.ended(AttemptEnd(Failed((bug,)), (bug,)), latest=entry(1, 10), now=40.0)
    assert isinstance(state, Ended) and state.status == FAILED and "max_failures (1) reached" in run.attempt.reason


# -- elastic training --------------------------------------------------------------------------
def elastic_cfg(*overrides):
    return cfg("cluster.num_workers=3", "cluster.min_workers=1", "cluster.elastic.max_resizes=2", *overrides)


def test_placing_tries_each_size_largest_first_until_the_resizes_are_spent():
    c = elastic_cfg("cluster.elastic.wait_s=20", "cluster.placement_timeout_s=60")
    run = Run(c)
    placing = run.begin(None)
    assert [(t.size, t.timeout_s) for t in placing.tries] == [(3, 20.0), (2, elastic.PROBE_S), (1, 60.0)]
    assert [(t.size, t.timeout_s) for t in Run(cfg()).begin(None).tries] == [(2, cfg().cluster.placement_timeout_s)]
    train(run, size=2)  # shrunk: one resize
    assert (run.attempt.resize, run.attempt.num_workers, run.budget.resizes) == (elastic.SHRINK, 2, 1)
    run.ended(failed(died()), latest=None, now=20.0)
    run.resumed(None)
    train(run, size=3)  # grown back: the second
    assert (run.attempt.resize, run.budget.resizes) == (elastic.GROW, 2)
    run.ended(failed(died()), latest=None, now=30.0)
    assert [t.size for t in run.resumed(None).tries] == [3]  # cluster.elastic.max_resizes spent: this size only


def test_a_lost_node_is_a_resize_not_a_failure():
    run = Run(elastic_cfg("failure.max_failures=0"))
    run.begin(None)
    train(run)
    state = run.ended(failed(died(), node_lost=True), latest=None, now=20.0)
    assert isinstance(state, Retrying) and "a lost node" in state.verdict.reason and run.budget.failures == 0
    not_elastic = Run(cfg("failure.max_failures=0"))
    not_elastic.begin(None)
    train(not_elastic)
    assert not_elastic.ended(failed(died(), node_lost=True), latest=None, now=20.0).status == FAILED


def test_a_smaller_group_looks_for_the_missing_workers_every_grow_check():
    run = Run(elastic_cfg("cluster.elastic.grow_check_s=10"))
    run.begin(None)
    train(run, size=2, now=100.0)
    assert run.grow_check(105.0, tolerated=0) is None  # not yet: grow_check_s since the placement
    assert run.grow_check(111.0, tolerated=0) == Grow(save_now=True, missing=1)  # MWMS, a function: save now
    assert run.grow_check(115.0, tolerated=0) is None
    full = Run(elastic_cfg())
    full.begin(None)
    train(full, size=3)
    assert full.grow_check(1000.0, tolerated=0) is None  # at full size: nothing to grow
    # A ParameterServerStrategy worker the coordinator went on without: regrown at the chief's next checkpoint.
    ps = Run(elastic_cfg("cluster.strategy=parameter_server", "cluster.num_ps=1"))
    ps.begin(None)
    train(ps, size=3)
    assert ps.grow_check(1000.0, tolerated=1) == Grow(save_now=False, missing=0) and ps.size == 2


def test_a_grow_is_retried_without_counting_as_a_failure():
    run = Run(elastic_cfg("failure.max_failures=0"))
    run.begin(None)
    train(run, size=2)
    grow = WorkerError("capacity for 3 workers is back", role="group", kind=failure.RESIZE)
    state = run.ended(AttemptEnd(Stopped(Cause.RESIZE, saved=True), (grow,)), latest=entry(1, 12), now=20.0)
    assert isinstance(state, Retrying) and run.budget.failures == 0 and run.attempt.cause == failure.RESIZE


def test_the_budget_reads_its_limits_from_the_config():
    assert FailureBudget.of(cfg("failure.max_failures=2", "failure.max_preemptions=4",
                                "cluster.elastic.max_resizes=1")).to_json() == {
        "failures": 0, "max_failures": 2, "preemptions": 0, "max_preemptions": 4, "resizes": 0, "max_resizes": 1,
        "recycles": 0}


def _documented_transitions() -> tuple[set[tuple[str, str]], str]:
    """docs/architecture.md's run-state table (## The run) as (from, to) pairs of state names ("start": no state
    yet), with its inputs column."""
    import re

    from tests.conftest import ROOT

    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## The run\n"):text.index("## Failures\n")]
    names = ("Placing", "Training", "Retrying", "Ended")
    pairs: set[tuple[str, str]] = set()
    inputs = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("state (its data)", "---"):
            continue
        outside = re.sub(r"\([^()]*\)", "", re.sub(r"`[^`]*`", "", cells[0]))  # (a state's data named in brackets)
        froms = ["start", *names[:3]] if outside.strip() == "any" else \
            ["start"] if outside.strip() == "—" else [n for n in names if re.search(rf"\b{n}\b", outside)]
        target = re.sub(r"\([^()]*\)", "", re.sub(r"`[^`]*`", "", cells[2]))
        tos = [n for n in names if re.search(rf"\b{n}\b", target)]
        assert froms and tos, f"a row of the run-state table names no state: {line}"
        pairs |= {(f, t) for f in froms for t in tos}
        inputs.append(cells[1])
    return pairs, " ".join(inputs)


def test_the_architecture_docs_run_state_table_is_the_machines():
    """Every transition `NEXT` allows is a row of docs/architecture.md's table, every row one it allows, and every
    input of `Run` is named there: the table cannot drift from the code."""
    import inspect

    from raytf._core.run_machine import Run
    from raytf._core.run_states import NEXT

    allowed = {(before.__name__ if before else "start", after.__name__) for before, afters in NEXT.items()
               for after in afters}
    documented, inputs = _documented_transitions()
    assert documented == allowed, (f"not in the table: {sorted(allowed - documented)}; "
                                   f"in the table, not allowed: {sorted(documented - allowed)}")
    methods = [name for name, _ in inspect.getmembers(Run, inspect.isfunction)
               if not name.startswith("_") and name not in ("grow_check",)]  # (a question, not an input)
    missing = [m for m in methods if f"`{m}(" not in inputs]
    assert not missing, f"inputs of Run not in docs/architecture.md's run-state table: {missing}"
