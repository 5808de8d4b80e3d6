"""Ray Data input (datasets=, train.datasets): each MWMS worker reads an equal share, every row once an epoch, a
new pass each epoch and each attempt; bad input is one line, before anything starts where it can be."""

import json
import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

import raytf
from raytf.errors import ConfigError
from tests.conftest import ROOT, leftovers, state_address

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

ROWS = 96


def _rows(n=ROWS):
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        x = rng.normal(size=4).astype("float32")
        out.append({"id": i, "x": x, "y": float(x @ np.array([1, -2, 0.5, 3], "float32") + 0.3)})
    return out


def _seen(ids_dir: Path, attempt: int, epoch: int) -> tuple[list[int], list[int], list[int]]:
    """The ids both ranks' replicas saw in that attempt's epoch; and each rank's per-replica batch sizes."""
    files = [json.loads((ids_dir / f"ids-a{attempt}-e{epoch}-r{rank}.json").read_text()) for rank in (0, 1)]
    return files[0]["ids"] + files[1]["ids"], files[0]["sizes"], files[1]["sizes"]


@pytest.mark.slow  # step 2 (three attempts); Ray Data's shares reach a script in step 1 (test_script_mode.py)
def test_every_row_once_an_epoch_through_a_retry_and_a_resume(fast_cfg, no_leaks, tmp_path):
    """read_parquet of a local file; rank 1 dies in attempt 1's second epoch: attempt 2 reads that epoch again from
    its start; a relaunch with more epochs resumes and reads on."""
    import ray

    parquet = tmp_path / "rows"
    ray.data.from_items(_rows(), override_num_blocks=2).write_parquet(str(parquet))  # two files, two read tasks
    ids_dir = tmp_path / "ids"
    ids_dir.mkdir()
    overrides = ["run.name=data", "train.entrypoint=tests.train_fns:ray_data_loop", "train.steps_per_epoch=null",
                 "train.batch_size=8", "cluster.worker.cpus=0.5", f"train.params.ids_dir={ids_dir}",
                 "metrics.every_steps=2"]
    result = raytf.fit(fast_cfg(*overrides, "train.epochs=3", "train.params.fail_at=[1,2]"), quiet=True,
                       datasets={"train": ray.data.read_parquet(str(parquet))})
    assert result.status == "succeeded", result.error
    assert [a["index"] for a in result.summary["attempts"]] == [1, 2]
    for attempt, epoch in [(1, 0), (2, 1), (2, 2)]:
        ids, sizes0, sizes1 = _seen(ids_dir, attempt, epoch)
        assert sorted(ids) == list(range(ROWS)), (attempt, epoch)  # every row once, across the two workers
        # 8 rows per replica and step, 48 rows per worker: 6 steps on each
        assert sizes0 == sizes1 == [8] * 6, (attempt, epoch)
    # Attempt 1 died after its rank 1's second step of epoch 1: that epoch was read again, whole, by attempt 2.
    assert not (ids_dir / "ids-a1-e1-r1.json").exists()
    epochs = result.metrics[(result.metrics["kind"] == "epoch") & (result.metrics["rank"] == 0)]
    loss = list(epochs.sort_values("epoch")["loss"])
    assert len(loss) == 3 and loss[-1] < loss[0] / 2, loss

    again = raytf.fit(fast_cfg(*overrides, "train.epochs=4"), quiet=True,
                      datasets={"train": ray.data.read_parquet(str(parquet))})
    assert again.status == "succeeded", again.error
    assert again.summary["resumed_from"].endswith(Path(result.last_checkpoint).name)
    ids, _, _ = _seen(ids_dir, 3, 3)
    assert sorted(ids) == list(range(ROWS))
    assert not any(ids_dir.glob("ids-a3-e[012]-*"))  # the relaunch trained only the missing epoch


def test_bad_datasets_are_one_line_before_anything_starts(fast_cfg, ps_cfg, no_leaks):
    import ray

    ds = ray.data.from_items(_rows(97))
    cases = [
        (fast_cfg("cluster.worker.cpus=0.5"), {"train": ds},
         "datasets['train']: 97 rows do not split equally among 2 workers"),
        (fast_cfg("cluster.worker.cpus=0.5"), {"train": ray.data.from_items([{"id": 0}])},
         "1 row(s) cannot be shared by 2 workers"),
        (fast_cfg("cluster.worker.cpus=0.5"), {"train": _rows()}, "datasets['train'] is a builtins.list, not a "
                                                                   "ray.data.Dataset"),
        (fast_cfg("cluster.worker.cpus=0.5"), [ds], "datasets= is a list"),
        # An embedded Ray never grows: Ray Data's map_batches would wait for a CPU for ever (from_items needs none).
        (fast_cfg(), {"train": ds.map_batches(lambda b: b)}, "of 'train' would wait for a CPU for ever: the tasks "
                                                             "reserve 2 of the cluster's 2 CPUs. Fix:"),
        (ps_cfg(), {"train": ds}, "not parameter_server"),
        (fast_cfg("train.datasets=tests.train_fns:datasets_that_raise"), None,
         "train.datasets ('tests.train_fns:datasets_that_raise') raised FileNotFoundError: s3://bucket/missing/"),
        (fast_cfg("train.datasets=tests.train_fns:datasets_not_a_mapping"), None, "returned list, not a mapping"),
        (fast_cfg("train.datasets=tests.train_fns:no_such_fn"), None, "has no function 'no_such_fn'"),
        (fast_cfg("train.datasets=tests.no_such_module:fn"), None, "module 'tests.no_such_module' could not be"),
        (fast_cfg("train.datasets=examples.ray_data:datasets"), {"train": ds}, "are both set"),
    ]
    for cfg, datasets, expected in cases:
        with pytest.raises(ConfigError) as e:
            raytf.fit(cfg, datasets=datasets, quiet=True)
        assert expected in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert leftovers() == {"actors": [], "placement_groups": []}


def _pixels(n=64):
    return [{"pixels": np.zeros(64, "float32"), "label": 0}] * n


def test_whether_a_dataset_runs_ray_data_tasks_is_known_from_its_plan(ray_local):
    import ray

    from raytf._driver.data import runs_tasks

    items = ray.data.from_items(_rows(8))
    assert not runs_tasks(items) and not runs_tasks(items.limit(4))  # its blocks exist: no task reads them
    assert runs_tasks(items.map_batches(lambda b: b)) and runs_tasks(ray.data.range(8))
    assert not runs_tasks(ray.data.range(8).materialize())


@pytest.mark.slow  # step 2 (a run; step 1 is at its budget)
def test_a_dataset_whose_blocks_exist_trains_with_every_cpu_reserved(fast_cfg, no_leaks, caplog):
    """2 workers of 1 CPU on the session's 2 CPUs: Ray Data has none, and from_items needs none (Ray Train runs it;
    raytf refused it before anything started, raytf issue 74)."""
    import ray

    cfg = fast_cfg("train.entrypoint=tests.train_fns:keras_on_train_dataset", "train.epochs=1",
                   "train.steps_per_epoch=null", "cluster.worker.cpus=1")
    assert ray.cluster_resources()["CPU"] == 2
    given = {"train": ray.data.from_items(_pixels()), "val": ray.data.from_items(_pixels(32))}
    result = raytf.fit(cfg, datasets=given, quiet=True)
    assert result.status == "succeeded"
    assert not [r for r in caplog.records if "wait for a CPU" in r.getMessage()]


@pytest.mark.slow  # step 2: waits out its start-up and hang timeouts
def test_a_dataset_that_needs_a_cpu_and_has_none_on_a_cluster_is_said_while_it_waits(tmp_path, no_leaks):
    """conf/ray_data.yaml's map_batches runs Ray Data tasks, each needing a CPU the tasks reserve all of, on a cluster
    the launch joins (an autoscaler may add a node: not refused before). Said 5 s into the attempt; the run fails
    when its start-up and hang watch end it."""
    proc = subprocess.run([sys.executable, "-m", "raytf.launch", "conf/ray_data.yaml", f"storage.path={tmp_path}",
                           f"ray.address={state_address()}", "ray.ship_code=off", "cluster.worker.cpus=1",
                           "cluster.standby=0", "train.epochs=1", "cluster.startup_timeout_s=40",
                           "failure.hang_timeout_s=15", "failure.max_failures=0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert proc.returncode != 0, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if "wait for a CPU" in line]
    head = "train.datasets ('examples.ray_data:datasets'): Ray Data's reads and map_batches of 'train'"
    assert said and head in said[0], said
    assert "the tasks reserve 2 of the cluster's 2 CPUs. Fix: cluster.worker.cpus=0.5" in said[0], said
    waited = [int(re.search(r"wait for a CPU \((\d+)s so far\)", line).group(1)) for line in said]
    assert waited[0] < 15 and all(b - a >= 60 for a, b in pairwise(waited)), waited  # (then every minute)


def test_a_dataset_not_given_fails_the_run_once_with_its_name(fast_cfg, no_leaks):
    import ray

    ds = ray.data.from_items([{"pixels": np.zeros(64, "float32"), "label": 0}] * 64)
    result = raytf.fit(fast_cfg("train.entrypoint=tests.train_fns:keras_on_train_dataset", "cluster.worker.cpus=0.5",
                                "train.params.dataset=valid", "train.steps_per_epoch=null"),
                       datasets={"train": ds}, quiet=True, raise_on_failure=False)
    assert result.status == "failed"
    assert len(result.summary["attempts"]) == 1  # a configuration error: never retried
    assert "ctx.dataset('valid'): no dataset named 'valid' was given to this run (given: 'train')" in str(result.error)


def test_cli_train_datasets_that_raise_exits_2_with_one_line(tmp_path, no_leaks):
    proc = subprocess.run([sys.executable, "-m", "raytf.launch", "conf/ray_data.yaml", f"storage.path={tmp_path}",
                           "train.datasets=tests.train_fns:datasets_that_raise", f"ray.address={state_address()}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("raytf:")]
    assert len(lines) == 1 and "raised FileNotFoundError" in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
