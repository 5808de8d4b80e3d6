"""What an attempt's end records (raytf/_core/attempt_record.py): the failure that explains a stop."""

from raytf._core import events as ev
from raytf._core import failure
from raytf._core.attempt_record import Cause, Drain, Recycle, Stopped

NODES = {0: "node-a", 1: "node-b"}
ROLES = {0: "worker", 1: "worker"}


def explain(stopped: Stopped):
    return stopped.error(4, lambda rank: NODES.get(rank, ""), ROLES.get)


def test_each_stop_is_explained_by_a_failure_of_its_own_kind_naming_who_and_whether_it_saved():
    resize = explain(Stopped(Cause.RESIZE, saved=True))
    assert (resize.kind, resize.role) == (failure.RESIZE, "group")
    assert "capacity for 4 workers is back" in resize.message and "a save at an agreed step" in resize.message
    assert "the latest checkpoint" in explain(Stopped(Cause.RESIZE)).message

    grew = explain(Stopped(Cause.RECYCLE, saved=False, recycle=Recycle(1, "worker", 2.61, 2.5, 1.0, 12, 3.0)))
    assert (grew.kind, grew.rank, grew.node_id) == (failure.RECYCLE, 1, "node-b")
    assert "uses 2.61 GiB of memory" in grew.message and "could not save" in grew.message
    # just past the limit reads as past it, in the message and in result.json (rounded up, never to the limit)
    just_past = Recycle(1, "worker", 1.6004, 1.6, 0.7, 18, 3.0)
    assert "uses 1.61 GiB" in explain(Stopped(Cause.RECYCLE, saved=True, recycle=just_past)).message
    assert just_past.record(True)["rss_gib"] == 1.601 > just_past.record(True)["limit_gib"] == 1.6

    notice = ev.Event(ev.PREEMPTED, "worker", 0, 1, ev.Notice(step=7))
    preempted = explain(Stopped(Cause.PREEMPTED, saved=True, notice=notice))
    assert (preempted.kind, preempted.rank, preempted.node_id) == (failure.PREEMPTED, 0, "node-a")
    assert preempted.message.startswith("preempted (SIGTERM) at step 7; saved")


def test_a_drain_names_the_first_task_on_the_node_or_the_data_service_when_only_its_servers_are_there():
    drained = explain(Stopped(Cause.DRAIN, saved=True, drain=Drain("node-b", (1,), 70.0, 10.0)))
    assert (drained.kind, drained.role, drained.rank, drained.node_id) == (failure.DRAIN, "worker", 1, "node-b")
    assert "its deadline 60s after the notice" in drained.message and "saved at an agreed step" in drained.message
    servers = explain(Stopped(Cause.DRAIN, drain=Drain("node-c", (), None, 10.0, ("dispatcher",))))
    assert (servers.role, servers.rank) == ("tf.data service", -1) and "no deadline" in servers.message
    nobody = explain(Stopped(Cause.DRAIN, drain=Drain("node-c", (), None, 10.0)))
    assert nobody.role == "group"
