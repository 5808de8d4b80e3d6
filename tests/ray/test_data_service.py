"""The tf.data service on Ray (data_service.*): the trainers' own pipeline run by service workers, every element
once an epoch across two MultiWorkerMirroredStrategy workers; service servers killed mid-epoch."""

import json
import os
import time

import pytest

from raytf._core import events as ev

ROWS = 96


def _seen(out, attempt: int, epoch: int) -> list[dict]:
    return [json.loads((out / f"a{attempt}-e{epoch}-r{rank}.json").read_text()) for rank in (0, 1)]


def _served_cfg(fast_cfg, out, *overrides: str):
    # The trainers and the one service worker share the session's 2 CPUs.
    return fast_cfg("train.entrypoint=tests.dataservice_fns:record_served", "train.steps_per_epoch=null",
                    "train.batch_size=4", "cluster.worker.cpus=0.5", "data_service.workers=1",
                    "data_service.cpus=0.5", f"train.params.out_dir={out}", f"train.params.rows={ROWS}",
                    "checkpoint.every_epochs=0", "checkpoint.export_model=false", *overrides)


@pytest.mark.slow  # step 2, beside the service's two kills below
@pytest.mark.timeout(300)
def test_every_element_once_an_epoch_preprocessed_by_the_service(fast_cfg, tmp_path, no_leaks, capsys):
    """The feature's main path (the default run's one tf.data service run): 2 MWMS workers read one job; their
    shares differ, their epochs end together (a custom loop with an all-reduce per step; Keras fit: the slow test
    below), and every id is seen once an epoch, marked by the service worker's process, not a trainer's."""
    import raytf
    from raytf import runs

    out = tmp_path / "seen"
    out.mkdir()
    result = raytf.fit(_served_cfg(fast_cfg, out, "run.name=served"), quiet=True)
    assert result.status == "succeeded", result.error
    service = result.summary["data_service"]
    assert service["workers"] == 1 and service["processing_mode"] == "distributed_epoch"
    assert service["attempts"][0]["used_by"] == [0, 1] and not service["lost"]
    for epoch in (0, 1):
        seen = _seen(out, 1, epoch)
        assert sorted(seen[0]["ids"] + seen[1]["ids"]) == list(range(ROWS)), epoch  # every id once
        # Preprocessed in one process that is neither trainer: the service's worker.
        assert len({p for s in seen for p in s["where"]}) == 1, seen
        assert not {str(s["pid"]) for s in seen} & {p for s in seen for p in s["where"]}
        assert seen[0]["total"] == seen[1]["total"] == (epoch + 1) * sum(range(ROWS))  # every step all-reduced
    assert runs.main(["show", result.run_dir]) == 0
    assert "input      served by the tf.data service: 1 worker(s) {CPU: 0.5} (distributed_epoch)" in \
        capsys.readouterr().out


class _Killer:
    """on_event: kills a tf.data service server's process (by pid, as a crash would) at rank 0's first step row of
    each epoch named in `at` ({epoch (0-based): "worker" or "dispatcher"})."""

    def __init__(self, at: dict[int, str]) -> None:
        self.at, self.killed = dict(at), []

    def __call__(self, e) -> None:
        if e.kind != ev.STEP or e.rank != 0 or e.attempt != 1:
            return
        epoch = int(e.payload["epoch"]) - 1  # (a step row carries the epoch under way, from 1)
        role = self.at.pop(epoch, None)
        if role is None:
            return
        from ray.util.state import list_actors

        from tests.conftest import state_address

        servers = list_actors(address=state_address(), filters=[("class_name", "=", "DataServiceServer"),
                                                                 ("state", "=", "ALIVE")], detail=True)
        victim = next(a for a in servers if (a.repr_name or "").startswith(f"DataServiceServer({role} "))
        os.kill(victim.pid, 9)
        self.killed.append((epoch, role, time.time()))


@pytest.mark.slow  # two kills and their recovery (~10 s of the dispatcher's worker timeout): CI's second step
@pytest.mark.timeout(420)
def test_killed_service_worker_and_dispatcher_are_replaced_and_training_goes_on(fast_cfg, tmp_path, no_leaks,
                                                                               capsys):
    """A service worker killed mid-epoch is replaced: the run goes on; TF's distributed_epoch visits an element at
    most once, so what the killed worker held is lost for that epoch (counted here), never repeated. The dispatcher
    killed mid-epoch restarts at its address from its journal: nothing lost. The next epoch is whole again, and a
    Keras fit epoch on another served pipeline ends together on both workers."""
    import raytf

    out = tmp_path / "seen"
    out.mkdir()
    killer = _Killer({0: "worker", 1: "dispatcher"})
    cfg = _served_cfg(fast_cfg, out, "run.name=served-kills", "train.epochs=3", "data_service.workers=2",
                      "data_service.cpus=0.5", "cluster.worker.cpus=0.25", "train.params.slow_ms=25",
                      "metrics.every_steps=1", "train.params.keras=true")
    result = raytf.fit(cfg, quiet=True, on_event=killer)
    assert result.status == "succeeded", result.error
    assert [k[:2] for k in killer.killed] == [(0, "worker"), (1, "dispatcher")]
    assert len(result.attempts) == 1  # no retry: the servers were started again while training went on
    lost = result.summary["data_service"]["lost"]
    assert [x["server"] for x in lost] == ["worker 0", "dispatcher"] or \
        [x["server"] for x in lost] == ["worker 1", "dispatcher"], lost
    counts = []
    for epoch in (0, 1, 2):
        ids = [i for s in _seen(out, 1, epoch) for i in s["ids"]]
        counts.append({"epoch": epoch, "seen": len(ids), "lost": ROWS - len(set(ids)),
                       "repeated": len(ids) - len(set(ids))})
    with capsys.disabled():
        print(f"\nkilled a service worker in epoch 0, the dispatcher in epoch 1: {counts}")
    assert all(c["repeated"] == 0 for c in counts), counts  # at most once
    assert counts[1]["lost"] == 0 and counts[2]["lost"] == 0, counts  # the journal kept the dispatcher's cursor
    for rank in (0, 1):
        assert len(json.loads((out / f"a1-keras-r{rank}.json").read_text())["loss"]) == 1


# With the other benchmarks' smokes: its own Ray, a run of 2 trainers and one with 2 trainers and a service of one
# worker.
@pytest.mark.bench
@pytest.mark.timeout(300)
def test_data_service_benchmark_smoke_mode_runs():
    """`python -m benchmarks.data_service --smoke`: the pipeline in the trainers, then served; both succeed, train
    the same steps, and the table prints the trainers' own CPU and input wait per step side by side."""
    from tests.conftest import benchmark_smoke

    out = benchmark_smoke("benchmarks.data_service", timeout_s=280)
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("| ")}
    assert rows["local"].rstrip(" |").endswith("1/1") and rows["service"].rstrip(" |").endswith("1/1"), out.stdout
    steps = {name: rows[name].split("|")[-3].strip() for name in ("local", "service")}
    assert steps["local"] == steps["service"] == "8", out.stdout  # 512 rows / global batch 64 per epoch
    assert "trainers' own CPU ms/step" in out.stdout and "service ÷ local (paired by round)" in out.stdout
