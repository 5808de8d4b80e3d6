"""A simulated multi-node cluster whose nodes change under a run (ray.cluster_utils.Cluster: nodes on this machine,
each with one CPU, so one worker per node). Elastic training: a node removed mid-run and the group shrinks without
waiting for cluster.placement_timeout_s; a node added back and the group grows at an agreed step, losing nothing
(the same on real hosts cut off the network: tests/cluster/test_hosts_elastic.py). A node drained with a deadline
(a spot node's notice): the group saves at an agreed step and moves off it."""

import json
from pathlib import Path

import pytest

import raytf
from raytf._core import events as ev
from tests.conftest import ROOT, leftovers

# Step 2 (-m slow): a simulated cluster of its own, nodes removed and added (~90 s); the elastic rules are pure
# (tests/core/test_elastic.py).
pytestmark = [pytest.mark.ray, pytest.mark.timeout(600), pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(session_ray):
    import os
    import socket

    import ray
    from ray.cluster_utils import Cluster

    session_ray.release()  # this process joins the simulated cluster instead
    os.chdir(ROOT)
    with socket.socket() as probe:  # a free dashboard port (ray.util.state needs the dashboard)
        probe.bind(("127.0.0.1", 0))
        dashboard_port = probe.getsockname()[1]
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": True,
                                                       "dashboard_port": dashboard_port})
    nodes = [c.add_node(num_cpus=1) for _ in range(3)]
    ray.init(address=c.address, log_to_driver=False, configure_logging=False)
    yield c, nodes
    ray.shutdown()
    c.shutdown()


def elastic_cfg(tmp_path, *overrides):
    return raytf.load_config(ROOT / "conf/local.yaml", [
        f"storage.path={tmp_path}", "ray.address=auto", "train.entrypoint=tests.train_fns:paced_loop",
        "cluster.num_workers=3", "cluster.min_workers=2", "cluster.placement_strategy=SPREAD",
        "cluster.placement_timeout_s=60", "cluster.elastic.wait_s=3", "cluster.elastic.grow_check_s=2",
        "train.epochs=8", "train.steps_per_epoch=5", "train.batch_size=6", "train.params.step_s=0.2",
        "metrics.every_steps=1", "checkpoint.keep_last=0", "failure.max_failures=0", "cluster.standby=0",
        *overrides])  # (standbys: the drain test's below, and test_standby.py)


def test_shrink_when_a_node_is_lost_then_grow_back_losing_nothing(cluster, tmp_path):
    c, nodes = cluster
    acted: list[str] = []
    added = []

    def chaos(e: ev.Event) -> None:
        # Attempt 1's first commit: a node goes (with its worker). Attempt 2's first commit: a node comes back.
        if e.kind != ev.CHECKPOINT:
            return
        if e.attempt == 1 and not acted:
            acted.append("removed")
            c.remove_node(nodes[2])
        elif e.attempt == 2 and acted == ["removed"]:
            acted.append("added")
            added.append(c.add_node(num_cpus=1))

    try:
        result = raytf.fit(elastic_cfg(tmp_path, "run.name=flex", "cluster.elastic.keep_global_batch=true"),
                           quiet=True, on_event=lambda e: chaos(e))
    finally:
        for n in added:
            c.remove_node(n)
    assert acted == ["removed", "added"]
    assert result.status == "succeeded", result.error
    attempts = result.attempts
    assert [a["num_workers"] for a in attempts] == [3, 2, 3]
    assert [a["resize"] for a in attempts] == [None, "shrink", "grow"]
    assert attempts[1]["cause"] == "resize" and attempts[1]["steps_lost"] == 0  # the grow lost no step
    # max_failures=0: the lost node's failure counted as a resize, not a failure (else no retry at all).
    assert attempts[0]["decision"] == "retry"
    assert result.final_metrics["epoch"] == 8
    # The grow saved at an agreed step and the full group resumed from exactly there.
    assert attempts[2]["resumed_from"].endswith(f"-s{attempts[1]['last_step']:010d}")
    df = result.metrics
    steps = df[(df["kind"] == "step") & (df["rank"] == 0)]
    for a, n in zip(attempts, (3, 2, 3)):
        mine = steps[steps["attempt"] == a["attempt"]]
        # paced_loop's all-reduce over the group, summed over the group again: n x n.
        assert set(mine["replicas"]) == {float(n * n)}, (a["attempt"], set(mine["replicas"]))
        assert set(mine["num_workers"]) == {n}
    assert set(steps["global_batch"]) == {18.0}  # keep_global_batch: 6 x 3 = 9 x 2 = 18
    on_disk = json.loads((Path(result.run_dir) / "result.json").read_text())
    assert [a["num_workers"] for a in on_disk["attempts"]] == [3, 2, 3]
    raytf.release_standbys()  # (the session keeps them for its next run otherwise)
    assert leftovers() == {"actors": [], "placement_groups": []}


def test_min_workers_out_of_reach_waits_placement_timeout_then_names_what_is_missing(cluster, tmp_path):
    import time

    from raytf.errors import PlacementError

    started = time.monotonic()
    with pytest.raises(PlacementError) as info:
        raytf.fit(elastic_cfg(tmp_path, "run.name=toofew", "cluster.num_workers=6", "cluster.min_workers=5",
                              "cluster.placement_timeout_s=4"), quiet=True)
    waited = time.monotonic() - started
    message = str(info.value)
    assert "placement group for 5 tasks" in message and "cluster.placement_timeout_s=4s" in message, message
    assert "\n" not in message and waited >= 4 + 3  # wait_s for 6, then placement_timeout_s for 5
    raytf.release_standbys()  # (the session keeps them for its next run otherwise)
    assert leftovers() == {"actors": [], "placement_groups": []}


def test_a_drained_node_is_left_after_a_save_at_an_agreed_step_losing_nothing(cluster, tmp_path, capsys):
    """A spot node's notice as Ray's autoscaler and KubeRay send it (a drain with a deadline: `ray drain-node
    --reason DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds 30`): every task saves at one agreed step and
    the group restarts on the nodes left, no step lost, its tasks in standbys warmed at the notice; counted as a
    preemption, not a failure. A drain of a node the run does not use changes nothing."""
    import time

    import ray
    from ray.core.generated import autoscaler_pb2

    c, _ = cluster
    # 4 nodes of 1 CPU (the tests above leave 2; alone, this one finds 3): worker 0's, worker 1's, one the run does
    # not use, and the one spare node left once that one is drained (where attempt 2 must go).
    alive = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")]
    added = [c.add_node(num_cpus=1) for _ in range(4 - len(alive))]
    c.wait_for_nodes()
    gcs = ray._raylet.GcsClient(address=c.address)
    head = ray.get_runtime_context().get_node_id()
    drained: dict[str, tuple[str, float]] = {}  # what -> (node, when)

    def drain(node: str, deadline_s: int) -> None:
        accepted, why = gcs.drain_node(node, autoscaler_pb2.DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"),
                                       "spot instance reclaimed (test)", int((time.time() + deadline_s) * 1000))
        assert accepted, why

    def notices(e: ev.Event) -> None:
        # Attempt 1's first commit: a node it does not use is drained; 3 steps later, worker 1's node.
        if e.attempt != 1 or e.rank != 0 or "worker 1" in drained:
            return
        if e.kind == ev.CHECKPOINT and "unused" not in drained:
            (group,) = [g for g in ray.util.placement_group_table().values()
                        if g["name"] == "raytf:drain" and g["state"] == "CREATED"]
            used = set(group["bundles_to_node_id"].values())
            (unused, *_) = sorted({n["NodeID"] for n in ray.nodes() if n["Alive"]} - used - {head})
            drain(unused, 30)
            drained["unused"] = (unused, time.time())
            drained["worker 1 at"] = (group["bundles_to_node_id"][1], e.payload.step + 3)
        elif e.kind == ev.STEP and "unused" in drained and e.payload.step >= drained["worker 1 at"][1]:
            drain(drained["worker 1 at"][0], 30)
            drained["worker 1"] = (drained["worker 1 at"][0], time.time())

    cfg = raytf.load_config(ROOT / "conf/local.yaml", [
        f"storage.path={tmp_path}", "ray.address=auto", "run.name=drain", "train.entrypoint=tests.train_fns:paced_loop",
        "cluster.num_workers=2", "cluster.placement_strategy=SPREAD", "train.epochs=6", "train.steps_per_epoch=5",
        "train.batch_size=6", "train.params.step_s=0.2", "metrics.every_steps=1", "failure.max_failures=0"])
    try:
        result = raytf.fit(cfg, quiet=True, on_event=notices)
    finally:
        for n in added:  # (a drained node's raylet is gone already: Ray ends a drained node once it is idle)
            c.remove_node(n)
    assert result.status == "succeeded", result.error
    first, second = result.attempts  # (the unused node's drain: no attempt of its own)
    node, noticed = drained["worker 1"]
    assert (first["cause"], first["rank"], first["node_id"], first["decision"]) == ("drain", 1, node, "retry")
    assert first["steps_lost"] == 0 and first["drain"]["saved"] and first["drain"]["node"] == node
    assert 0 < first["drain"]["save_before_deadline_s"] < 30
    assert second["resumed_from"].endswith(f"-s{first['last_step']:010d}")  # the agreed step's save
    assert node not in {t["node_id"] for t in result.tasks}  # placed off the drained node
    # Both tasks of attempt 2 in standbys: worker 0's node's (asked for at attempt 1's first step) and the spare
    # node's, asked for at the notice (TaskGroup.refill_off), while the group saved.
    assert second["standby_tasks"] == 2
    assert result.summary["budget"]["preemptions"] == 1 and result.summary["budget"]["failures"] == 0
    with capsys.disabled():
        print(f"\ndrain: saved {first['drain']['save_after_notice_s']:.2f}s after the notice (the driver saw it "
              f"{first['drain']['seen_at'] - noticed:.2f}s after it was sent), "
              f"{first['drain']['save_before_deadline_s']:.2f}s before the deadline; steps lost 0; first step of "
              f"attempt 2 {second['first_step_at'] - noticed:.2f}s after the notice")
    raytf.release_standbys()
    assert leftovers() == {"actors": [], "placement_groups": []}
