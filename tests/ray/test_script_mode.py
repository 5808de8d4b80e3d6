"""Script mode (train.script / train.module): existing tf.distribute programs run unmodified on every task."""

import json
from pathlib import Path

import pytest

import raytf
from raytf._core import events as ev
from tests import documented
from tests.conftest import _quick
from tests.processes import leftover_script_processes as _leftovers


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_seed_style_mwms_script_runs_unmodified(script_cfg, tmp_path, no_leaks):
    cfg = script_cfg("run.name=seed", "metrics.every_steps=5", "checkpoint.keep_last=0",
                     "train.args=[--epochs,'2',--steps-per-epoch,'10',--model-dir,'{checkpoint_dir}',"
                     "--log-dir,'{log_dir}']")
    seen = []
    result = raytf.fit(cfg, quiet=True, on_event=seen.append)
    assert result.status == "succeeded", result.error
    df = result.metrics
    for rank in (0, 1):
        epochs = df[(df["kind"] == "epoch") & (df["rank"] == rank)].sort_values("epoch")
        assert list(epochs["epoch"]) == [1, 2] and list(epochs["step"]) == [10, 20]
        assert {"loss", "accuracy"} <= set(epochs.dropna(axis=1).columns)
    assert result.summary["num_replicas_in_sync"] == 2
    # The step-time breakdown, measured in the script's own process (its Keras fit's get_next and all-reduce).
    steps = df[(df["kind"] == "step")].dropna(subset=["step_time_s"])
    assert set(steps["rank"]) == {0, 1}
    assert steps[["input_wait_s", "collective_s", "compute_s"]].notna().all().all()
    assert ((steps["input_wait_s"] + steps["collective_s"] + steps["compute_s"]) <= steps["step_time_s"] * 1.01).all()
    # The script's ModelCheckpoint files, synced after each epoch from the chief.
    names = [Path(c).name for c in result.checkpoints]
    assert names == ["ckpt-n00000001-e000001-s0000000010", "ckpt-n00000002-e000002-s0000000020"]
    assert (Path(result.checkpoints[-1]) / "ckpt-2.index").exists()
    assert json.loads((Path(result.checkpoints[-1]) / "_COMMITTED.json").read_text())["source"] == "script"
    # Its TensorBoard callback worked, into $RAYTF_LOG_DIR, uploaded beside the task's log when it ended.
    assert list((Path(result.run_dir) / "logs/worker0-attempt1").rglob("events.out.tfevents.*"))
    # Rank 0's output streamed (prefixed on the driver), rank 1's only kept in its log.
    streamed_lines = [(e.rank, line) for e in seen if e.kind == ev.OUTPUT for _, line in e.payload["lines"]]
    assert {r for r, _ in streamed_lines} == {0}
    assert any("Epoch 2/2" in line for _, line in streamed_lines)
    log1 = (Path(result.run_dir) / "logs/worker1-attempt1.log").read_text()
    assert "Epoch 2/2" in log1
    assert _leftovers() == []


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_script_exiting_3_on_rank_1_fails_the_run(script_cfg, no_leaks):
    cfg = script_cfg("run.name=exit3", "train.script=tests/scripts/exit_on_rank1.py", "train.args=[]",
                     "train.stream_output=all")
    seen = []
    result = raytf.fit(cfg, quiet=True, on_event=seen.append, raise_on_failure=False)
    assert result.status == "failed"
    err = result.error.failures[("worker", 1)]
    assert err.kind == "user" and err.error_type == "exit 3"
    assert "exited with code 3" in str(result.error) and "worker 1" in str(result.error)
    assert "giving up, no data shard for me" in str(result.error)  # the last stderr lines
    assert len(result.attempts) == 1  # failed before any step: not retried
    assert result.summary["error"]["rank"] == 1
    # The script's own TF_CONFIG line was refused with a warning naming it (ours kept the index right).
    lines = [line for e in seen if e.kind == ev.OUTPUT for _, line in e.payload["lines"]]
    assert any("exit_on_rank1.py:16 sets TF_CONFIG: ignored" in line for line in lines)
    # worker 0's blocked script died with its actor, and both workers' helpers with their scripts.
    assert _leftovers() == []


@pytest.mark.slow  # step 2 (issue 50: the README's tests' budget): ParameterServerStrategy trains in step 1 (ps_run)
@pytest.mark.ray
@pytest.mark.timeout(300)
def test_parameter_server_script(tmp_path, no_leaks):
    """docs/scripts.md's ParameterServerStrategy coordinator program (examples/ps_script.py on conf/ps_local.yaml's
    chief, 2 workers and 1 ps), as that page launches it (tests/documented.py), for 2 epochs of 10 steps."""
    cfg = documented.config(
        "python -m raytf.launch conf/ps_local.yaml train.entrypoint= train.script=examples/ps_script.py "
        "'train.args=[--working-dir,\"{checkpoint_dir}\"]'",
        *_quick(tmp_path, [], ["run.name=ps-script", "metrics.every_steps=5",
                               "train.args=[--epochs,'2',--steps-per-epoch,'10',--working-dir,'{checkpoint_dir}']"]))
    seen = []
    result = raytf.fit(cfg, quiet=True, on_event=seen.append)
    assert result.status == "succeeded", result.error
    assert result.summary["roles"] == {"chief": 1, "worker": 2, "ps": 1}
    df = result.metrics
    epochs = df[df["kind"] == "epoch"]
    assert list(epochs["rank"]) == [0, 0] and list(epochs["epoch"]) == [1, 2]
    assert (Path(result.checkpoints[-1]) / "ckpt.index").exists()
    lines = [line for e in seen if e.kind == ev.OUTPUT for _, line in e.payload["lines"]]
    assert any(line.startswith("final weights norm:") for line in lines)
    assert _leftovers() == []


@pytest.mark.slow  # step 2: a script runs in step 1; its resume by relaunch here
@pytest.mark.ray
@pytest.mark.timeout(300)
def test_module_script_resumes_from_its_synced_checkpoint(script_cfg, no_leaks):
    cfg = script_cfg("run.name=probe", "cluster.strategy=mirrored", "cluster.num_workers=1", "train.script=",
                     "train.module=tests.scripts.resume_probe", "train.args=[]")
    first = raytf.fit(cfg, quiet=True)
    assert first.status == "succeeded", first.error
    second = raytf.fit(cfg, quiet=True)  # same run.name: resumes from the synced state
    assert second.status == "succeeded", second.error
    assert second.summary["resumed_from"].endswith("ckpt-n00000001-e000001-s0000000003")
    state = json.loads((Path(second.last_checkpoint) / "state.json").read_text())
    assert state == {"launches": 2}
    df = second.metrics
    steps = df[df["kind"] == "step"]
    assert list(steps["step"]) == [1, 2, 3, 4, 5, 6] and list(steps["launches"]) == [1, 1, 1, 2, 2, 2]
    log = (Path(second.run_dir) / "logs/worker0-attempt2.log").read_text()
    assert "resumed_from=ckpt-n00000001-e000001-s0000000003 launches_before=1" in log


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_script_reads_ray_data_with_raytf_dataset(script_cfg, tmp_path, no_leaks):
    """raytf.fit(datasets=) in script mode: each worker's host serves its equal share to the script's
    raytf.dataset; a custom loop over experimental_distribute_dataset sees every row once an epoch."""
    import numpy as np
    import ray

    rng = np.random.default_rng(0)
    rows = [{"id": i, "x": rng.normal(size=4).astype("float32"), "y": float(i % 7)} for i in range(96)]
    ids_dir = tmp_path / "ids"
    ids_dir.mkdir()
    cfg = script_cfg("run.name=script-data", "train.script=tests/scripts/ray_data_script.py",
                     f"train.args=['{ids_dir}','2']", "cluster.worker.cpus=0.5")
    result = raytf.fit(cfg, quiet=True, datasets={"train": ray.data.from_items(rows)})
    assert result.status == "succeeded", result.error
    for epoch in (0, 1):
        seen = [json.loads((ids_dir / f"ids-e{epoch}-r{rank}.json").read_text()) for rank in (0, 1)]
        assert sorted(seen[0]["ids"] + seen[1]["ids"]) == list(range(96)), epoch  # every row once, both workers
        assert seen[0]["sizes"] == seen[1]["sizes"] == [8] * 6, epoch  # 48 rows a worker, 8 a replica a step
    epochs = result.metrics[(result.metrics["kind"] == "epoch") & (result.metrics["rank"] == 0)]
    assert list(epochs["epoch"]) == [1, 2]
    assert _leftovers() == []
