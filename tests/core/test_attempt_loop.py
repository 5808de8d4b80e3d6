"""The attempt loop as a state machine (raytf/_core/attempt_loop.py), driven over a fake task group: training,
failures, hangs, save-now after a preemption notice or a node's drain, Ctrl-C, lost ParameterServerStrategy
workers, draining."""

from raytf._core import events as ev
from raytf._core import failure
from raytf._core.attempt_drive import drive
from raytf._core.attempt_loop import AttemptLoop, Finished, Timing
from raytf._core.attempt_record import Cause, Done, Drain, Failed, Hung, Interrupted, Recycle, Stopped
from raytf._core.memory import MemoryWatch
from raytf.errors import WorkerError

TIMING = Timing(hang_timeout_s=30, startup_timeout_s=60, interrupt_timeout_s=20, server_grace_s=10,
                evaluator_grace_s=100)


class FakeGroup:
    """Plays a script of rounds: each poll returns the next (events, finished), or raises it if it is an
    exception (a Ctrl-C); the clock advances by the poll's timeout. Once the script is over, polls return
    nothing (time passes). Records what the loop asked of it."""

    def __init__(self, rounds, reports=None, poll_s: float = 1.0) -> None:
        self.rounds, self.reports, self.t = list(rounds), reports, 0.0
        self.calls: list = []

    def clock(self) -> float:
        return self.t

    def poll(self, timeout_s: float):
        self.t += timeout_s
        if not self.rounds:
            return [], []
        r = self.rounds.pop(0)
        if isinstance(r, BaseException):
            raise r
        return r

    def ask_save(self, count: int, timeout_s: float):
        self.calls.append(("ask_save", count))
        reports = self.reports(self) if callable(self.reports) else self.reports
        if isinstance(reports, BaseException):
            raise reports
        return reports or {}

    def decide(self, save_at: int) -> None:
        self.calls.append(("decide", save_at))

    def release(self) -> None:
        self.calls.append(("release",))

    def rest(self):
        return []


def step(rank: int, n: int, attempt: int = 1, kind: str = ev.STEP) -> ev.Event:
    return ev.Event(kind, "worker", rank, attempt, {"step": n, "epoch": 1})


def died(rank: int, kind: str = failure.SYSTEM, role: str = "worker") -> WorkerError:
    return WorkerError("the task's actor died", role=role, rank=rank, kind=kind)


def run(group: FakeGroup, primary=(0, 1), background=None, drained=None, **kw) -> tuple[AttemptLoop, list[ev.Event]]:
    loop = AttemptLoop(primary={r: "worker" for r in primary}, background=background or {}, timing=TIMING,
                       attempt=1, now=0.0, **kw)
    seen: list[ev.Event] = []
    drive(loop, group, seen.extend, poll_s=1.0, clock=group.clock, drained=drained)
    return loop, seen


def test_training_that_ends_drains_then_is_done():
    g = FakeGroup([([step(0, 1), step(1, 1)], []), ([], [Finished(0), Finished(1)])])
    loop, seen = run(g)
    assert loop.end == Done() and g.calls == [("release",)] and len(seen) == 2


def test_a_failed_task_fails_the_attempt_with_its_error():
    g = FakeGroup([([step(0, 1)], [Finished(1, died(1))])])
    loop, _ = run(g)
    assert isinstance(loop.end, Failed) and [e.rank for e in loop.end.errors] == [1]


def test_a_rank_silent_for_the_hang_timeout_is_hung_and_heartbeats_keep_it_alive():
    # Rank 0 heartbeats every 10 s; rank 1 never reports: hung once the start-up allowance and the timeout pass.
    rounds = [([step(0, i, kind=ev.HEARTBEAT)], []) if i % 10 == 0 else ([], []) for i in range(1, 200)]
    loop, _ = run(FakeGroup(rounds))
    assert loop.end == Hung((1,))
    assert 90 < loop.now <= 92  # 60 s start-up allowance + 30 s without progress


def test_events_of_an_earlier_attempt_are_not_progress():
    rounds = [([step(1, i, attempt=0)], []) for i in range(200)]
    loop, _ = run(FakeGroup(rounds), primary=(1,))
    assert loop.end == Hung((1,))


def test_a_preemption_notice_saves_at_an_agreed_step_then_fails_as_preempted():
    notice = ev.Event(ev.PREEMPTED, "worker", 1, 1, {"step": 7})
    g = FakeGroup([([step(0, 6), notice], []), ([], [Finished(0), Finished(1)])], reports={0: 7, 1: 8})
    loop, _ = run(g)
    assert g.calls == [("ask_save", 2), ("decide", 9)]
    assert loop.end == Stopped(Cause.PREEMPTED, saved=True, notice=notice) and loop.end.cause == failure.PREEMPTED


def drain_at(t: float, deadline: float | None = 60.0, ranks=(1,)):
    """A `drained` input: node "n1" (holding `ranks`) drained from time `t`, its deadline at `deadline`; how often
    it was asked."""
    asked = []

    def drained(now: float):
        asked.append(now)
        return Drain("n1", tuple(ranks), deadline, now) if now >= t else None

    return drained, asked


def test_a_drain_saves_at_an_agreed_step_then_stops_to_move_off_the_node():
    drained, asked = drain_at(2.0)
    g = FakeGroup([([step(0, 5), step(1, 5)], []), ([step(0, 6)], []), ([], [Finished(0), Finished(1)])],
                  reports={0: 6, 1: 6})
    loop, _ = run(g, drained=drained)
    assert g.calls == [("ask_save", 2), ("decide", 7)]
    assert loop.end == Stopped(Cause.DRAIN, saved=True, drain=Drain("n1", (1,), 60.0, 2.0))
    assert loop.end.cause == failure.DRAIN
    assert asked == [1.0, 2.0]  # asked while training only: not once the save is under way


def test_a_drain_waits_no_longer_for_the_save_than_its_deadline():
    drained, _ = drain_at(2.0, deadline=7.0)
    g = FakeGroup([([step(0, 5), step(1, 5)], [])], reports={0: 6, 1: 6})  # the tasks never finish their save
    loop, _ = run(g, drained=drained)
    assert loop.end == Stopped(Cause.DRAIN, saved=False, drain=Drain("n1", (1,), 7.0, 2.0))
    assert 7.0 < loop.now <= 8.0  # (checkpoint.interrupt_timeout_s is 20 s)


def test_a_scripts_drain_moves_at_its_next_commit_or_at_the_deadline():
    commit = ev.Event(ev.CHECKPOINT, "worker", 0, 1, {"uri": "s3://b/ckpt-1", "epoch": 1, "step": 9, "seq": 1})
    drained, asked = drain_at(2.0, deadline=30.0)
    g = FakeGroup([([step(0, 5)], []), ([], []), ([step(0, 6)], []), ([step(0, 7)], []), ([commit], [])])
    loop, _ = run(g, drained=drained, can_save_now=False)
    assert g.calls == [] and loop.end == Stopped(Cause.DRAIN, saved=True, drain=Drain("n1", (1,), 30.0, 2.0))
    assert asked == [1.0, 2.0]  # not asked again while the script trains on to its commit
    # No commit before the deadline: it moves then; the script's last synced checkpoint stands.
    drained, _ = drain_at(2.0, deadline=30.0)
    loop, _ = run(FakeGroup([([step(0, 5)], [])]), drained=drained, can_save_now=False)
    assert loop.end == Stopped(Cause.DRAIN, saved=False, drain=Drain("n1", (1,), 30.0, 2.0))
    assert 30.0 < loop.now <= 31.0
    # The node goes first (its task dies): still the drain, not a failure of the program's.
    drained, _ = drain_at(2.0, deadline=30.0)
    loop, _ = run(FakeGroup([([step(0, 5)], []), ([], []), ([], [Finished(1, died(1))])]), drained=drained,
                  can_save_now=False)
    assert loop.end == Stopped(Cause.DRAIN, saved=False, drain=Drain("n1", (1,), 30.0, 2.0))
    # The program's own error meanwhile is its own failure.
    drained, _ = drain_at(2.0, deadline=30.0)
    loop, _ = run(FakeGroup([([step(0, 5)], []), ([], []), ([], [Finished(0, died(0, kind=failure.USER))])]),
                  drained=drained, can_save_now=False)
    assert isinstance(loop.end, Failed)


def test_the_drain_acted_on_is_of_a_node_holding_a_task_or_a_data_service_server(caplog):
    tasks, servers = {"a": [1, 0], "b": [2]}, {"b": ["worker 1"], "c": ["dispatcher", "worker 0"]}
    assert Drain.first(tasks, servers, {"z": 9.0}, 1.0) is None  # a node the run does not use: nothing
    assert Drain.first(tasks, servers, {"a": 9.0, "c": None}, 1.0) == Drain("a", (0, 1), 9.0, 1.0)
    only_servers = Drain.first(tasks, servers, {"c": None}, 1.0)
    assert only_servers == Drain("c", (), None, 1.0, ("dispatcher", "worker 0"))
    assert Drain.first({}, servers, {"b": 5.0}, 1.0) == Drain("b", (), 5.0, 1.0, ("worker 1",))
    assert only_servers.record(True, 3.0)["servers"] == ["dispatcher", "worker 0"]
    # A drain of the service's servers alone moves the run as any drain does: a save at an agreed step.
    g = FakeGroup([([step(0, 5), step(1, 5)], []), ([], [Finished(0), Finished(1)])], reports={0: 5, 1: 5})
    loop, _ = run(g, drained=lambda now: only_servers)
    assert g.calls == [("ask_save", 2), ("decide", 6)]
    assert loop.end == Stopped(Cause.DRAIN, saved=True, drain=only_servers)
    assert "with the tf.data service's dispatcher, the tf.data service's worker 0 on it" in caplog.text


def rss(rank: int, n: int, gib: float) -> ev.Event:
    return ev.Event(ev.STEP, "worker", rank, 1, {"step": n, "epoch": 1, "metrics": {"loss": 1.0, "rss_gib": gib}})


def test_a_task_whose_memory_grew_past_its_limit_is_recycled_at_an_agreed_step(caplog):
    g = FakeGroup([([rss(0, 4, 1.0), rss(1, 4, 1.1)], []), ([rss(0, 8, 1.9), rss(1, 8, 2.0)], []),
                   ([rss(0, 12, 2.6), rss(1, 12, 2.0)], []), ([], [Finished(0), Finished(1)])], reports={0: 12, 1: 12})
    loop, _ = run(g, memory=MemoryWatch({0: 2.5, 1: 2.5}))
    assert g.calls == [("ask_save", 2), ("decide", 13)]
    assert loop.end == Stopped(Cause.RECYCLE, saved=True, recycle=Recycle(0, "worker", 2.6, 2.5, 1.0, 12, 3.0))
    assert "worker 0 uses 2.60 GiB (it started this attempt at 1.00 GiB), past failure.max_task_rss_gb" \
        in caplog.text
    # Below the limit (or with no limit: rss_limits of failure.max_task_rss_gb=0), nothing changes.
    for watch in (MemoryWatch({0: 3.0, 1: 3.0}), MemoryWatch({})):
        g = FakeGroup([([rss(0, 4, 1.0)], []), ([rss(0, 8, 2.9)], []), ([], [Finished(0), Finished(1)])])
        assert run(g, memory=watch)[0].end == Done() and g.calls == [("release",)]


def test_a_task_that_started_near_its_limit_or_right_after_a_recycle_is_not_recycled(caplog):
    # Started at 2.4 of 2.5 GiB: a fresh process would be as big. Said once, not recycled.
    g = FakeGroup([([rss(0, 4, 2.4)], []), ([rss(0, 8, 2.6)], []), ([rss(0, 12, 2.7)], []),
                   ([], [Finished(0), Finished(1)])])
    loop, _ = run(g, memory=MemoryWatch({0: 2.5}))
    assert loop.end == Done() and g.calls == [("release",)]
    assert caplog.text.count("but is not recycled: it started this attempt at 2.40 GiB") == 1
    # Past the limit again within memory.MIN_INTERVAL_S of a recycle: not a slow leak.
    g = FakeGroup([([rss(0, 4, 1.0)], []), ([rss(0, 8, 2.6)], []), ([], [Finished(0), Finished(1)])])
    loop, _ = run(g, memory=MemoryWatch({0: 2.5}, recycle_from=600.0))
    assert loop.end == Done() and "the group was recycled less than 600s ago" in caplog.text


def test_a_scripts_recycle_waits_for_its_next_commit():
    commit = ev.Event(ev.CHECKPOINT, "worker", 0, 1, {"uri": "s3://b/ckpt-1", "epoch": 1, "step": 9, "seq": 1})
    g = FakeGroup([([rss(0, 4, 1.0)], []), ([rss(0, 8, 2.6)], []), ([rss(0, 9, 2.7)], []), ([commit], [])])
    loop, _ = run(g, memory=MemoryWatch({0: 2.5}), can_save_now=False)
    assert g.calls == [] and loop.end == Stopped(Cause.RECYCLE, saved=True,
                                                 recycle=Recycle(0, "worker", 2.6, 2.5, 1.0, 8, 2.0))


def test_a_save_request_not_answered_by_every_task_gives_up_the_save():
    notice = ev.Event(ev.PREEMPTED, "worker", 1, 1, {"step": 7})
    g = FakeGroup([([notice], [])], reports={0: 7})
    loop, _ = run(g)
    assert g.calls == [("ask_save", 2)] and loop.end == Stopped(Cause.PREEMPTED, saved=False, notice=notice)


def test_ctrl_c_saves_first_and_ends_interrupted():
    g = FakeGroup([([step(0, 3)], []), KeyboardInterrupt(), ([], [Finished(0), Finished(1)])], reports={0: 3, 1: 3})
    loop, _ = run(g)
    assert g.calls == [("ask_save", 2), ("decide", 4)] and loop.end == Interrupted(saved=True)


def test_a_second_ctrl_c_during_the_final_save_ends_at_once():
    g = FakeGroup([KeyboardInterrupt()], reports=KeyboardInterrupt())
    loop, _ = run(g)
    assert g.calls == [("ask_save", 2)] and loop.end == Interrupted(saved=False, at_once=True)


def test_ctrl_c_without_on_interrupt_or_in_script_mode_ends_at_once(caplog):
    for kw in ({"save_on_interrupt": False}, {"can_save_now": False}):
        caplog.clear()
        g = FakeGroup([KeyboardInterrupt()], reports={0: 1, 1: 1})
        loop, _ = run(g, **kw)
        assert g.calls == [] and isinstance(loop.end, Interrupted)
    # A script is told it is being stopped, not that a final checkpoint is on its way.
    assert "stopping the script" in caplog.text and "saving a final checkpoint" not in caplog.text


def test_tasks_that_do_not_stop_by_the_deadline_end_the_save_unsaved():
    g = FakeGroup([KeyboardInterrupt()], reports={0: 3, 1: 3})  # decided, then nobody returns
    loop, _ = run(g)
    assert loop.end == Interrupted(saved=False) and 20 < loop.now <= 22


def test_no_hang_is_called_while_tasks_save_and_stop():
    g = FakeGroup([KeyboardInterrupt()] + [([], [])] * 15 + [([], [Finished(0), Finished(1)])], reports={0: 3, 1: 3})
    loop, _ = run(g, primary=(0, 1))
    assert loop.end == Interrupted(saved=True)  # (not hung)


def test_a_ps_worker_lost_alone_is_tolerated_one_lost_with_its_host_is_not():
    background = {1: "worker", 2: "worker", 3: "ps"}
    g = FakeGroup([([], [Finished(2, died(2), alone=True)]), ([step(0, 5)], [Finished(0)]),
                   ([], [Finished(1), Finished(3)])])
    loop, _ = run(g, primary=(0,), background=background)
    assert loop.end == Done() and [r for r, _, _ in loop.lost] == [2]
    g = FakeGroup([([], [Finished(2, died(2), alone=False)])])
    loop, _ = run(g, primary=(0,), background=background)
    assert isinstance(loop.end, Failed) and [e.rank for e in loop.end.errors] == [2]


def test_a_lost_ps_fails_the_attempt():
    g = FakeGroup([([], [Finished(3, died(3, role="ps"))])])
    loop, _ = run(g, primary=(0,), background={1: "worker", 3: "ps"})
    assert isinstance(loop.end, Failed)


def test_the_evaluator_gets_its_grace_after_training_then_is_stopped():
    g = FakeGroup([([], [Finished(0)])])
    loop, _ = run(g, primary=(0,), background={1: "evaluator"})
    assert loop.end == Done() and g.calls == [("release",)] and 100 < loop.now <= 102
    g = FakeGroup([([], [Finished(0)]), ([], [Finished(1, died(1, kind=failure.USER, role="evaluator"))])])
    loop, _ = run(g, primary=(0,), background={1: "evaluator"})
    assert isinstance(loop.end, Failed)  # an evaluator that fails its last round fails the attempt


def busy(rank: int, what: str, allow_s: float) -> ev.Event:
    return ev.Event(ev.BUSY, "worker", rank, 1, {"what": what, "allow_s": allow_s})


def test_ranks_blocked_on_a_busy_peer_are_not_hung_but_a_busy_rank_past_its_allowance_is():
    waits = busy(0, "waiting for an upload slot", 200)
    # Rank 0 is busy (it heartbeats, but that is not the point); rank 1 is silent, blocked in a collective.
    rounds = [([step(0, 1), step(1, 1)], []), ([waits], [])] + [([], [])] * 150 + \
             [([busy(0, "", 0)], [])] + [([], [])] * 10 + \
             [([step(0, 2), step(1, 2)], []), ([], [Finished(0), Finished(1)])]
    loop, _ = run(FakeGroup(rounds))
    assert loop.end == Done()  # (not hung:) 150 s silent, well past the 30 s hang timeout
    rounds = [([step(0, 1), step(1, 1)], []), ([waits], [])] + [([], [])] * 300
    loop, _ = run(FakeGroup(rounds))
    assert loop.end == Hung((0,), {0: "waiting for an upload slot"})
    assert 200 < loop.now <= 204


def test_a_busy_rank_waiting_on_a_busy_peer_is_not_hung_while_the_peer_is_within_its_allowance():
    """The model's export is collective under MWMS: worker 1, whose allowance is the hang timeout alone (it holds
    no upload to size one by), waits in it on the chief, whose allowance counts its model's bytes and which may be
    slow to export on a loaded machine or still waiting for an upload slot (CI's failure of
    test_a_slow_upload_is_not_a_hang: worker 1 "hung" 5 s into the export, the chief within its 155 s). Not a
    hang; once the chief is done worker 1's allowance starts afresh, and a group whose busy ranks are all past
    theirs is hung."""
    start = [([step(0, 3), step(1, 3)], []), ([busy(0, "exporting the model", 155)], []),
             ([busy(1, "exporting the model", 5)], [])] + [([], [])] * 100
    loop, _ = run(FakeGroup([*start, ([busy(1, "", 0), busy(0, "", 0)], [Finished(0), Finished(1)])]))
    assert loop.end == Done()  # worker 1 busy for ~100 s on an allowance of 5
    # The chief is done and worker 1 stays busy, alone: hung once its fresh allowance (5 s) has passed.
    loop, _ = run(FakeGroup([*start, ([busy(0, "", 0)], [Finished(0)])]))
    assert loop.end == Hung((1,), {1: "exporting the model"}) and 109 < loop.now <= 111
    # Both busy and both past their allowances: both are named.
    loop, _ = run(FakeGroup(start))
    assert loop.end == Hung((0, 1), {0: "exporting the model", 1: "exporting the model"})
    assert 157 < loop.now <= 159


def test_the_busy_allowance_grows_with_the_bytes():
    assert failure.busy_allowance_s(0, 300, 1.0) == 300
    assert failure.busy_allowance_s(1024 ** 3, 300, 1.0) == 300 + 1024
