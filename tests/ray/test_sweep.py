"""Sweeps through Ray Tune, and the example notebook that runs one."""

import json
from pathlib import Path

import pytest

import raytf
from raytf.errors import ConfigError
from tests.conftest import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


@pytest.mark.slow  # ~45 s on 2 cores; a grid through the same path runs by default (test_a_failing_trial_...)
def test_grid_of_four(fast_cfg, no_leaks):
    cfg = fast_cfg("train.epochs=1", "train.steps_per_epoch=4")
    space = {"train.params.learning_rate": [0.01, 0.003], "cluster.num_workers": [1, 2]}
    df = raytf.sweep(cfg, space, max_concurrent=2, name="grid")
    assert len(df) == 4
    assert sorted(zip(df["train.params.learning_rate"], df["cluster.num_workers"])) == [
        (0.003, 1), (0.003, 2), (0.01, 1), (0.01, 2)]
    assert (df["status"] == "succeeded").all(), df[["status", "error"]]
    assert df["final_loss"].notna().all() and df["best_val_accuracy"].notna().all()
    for run_dir in df["run_dir"]:
        assert (Path(run_dir) / "result.json").exists()


def test_a_failing_trial_is_reported_and_the_others_run(fast_cfg, no_leaks):
    # A value that fails its trial's config is reported, not dropped; the other trials still run.
    cfg = fast_cfg("train.epochs=1", "train.steps_per_epoch=4")
    bad = raytf.sweep(cfg, {"train.batch_size": [16, -4]}, max_concurrent=2, name="bad")
    assert len(bad) == 2
    failed = bad[bad["train.batch_size"] == -4].iloc[0]
    assert failed["status"] == "failed" and "train.batch_size" in failed["error"]
    assert bad[bad["train.batch_size"] == 16].iloc[0]["status"] == "succeeded"


def test_misspelt_key_fails_before_any_trial(fast_cfg):
    with pytest.raises(ConfigError, match="Did you mean"):
        raytf.sweep(fast_cfg(), {"train.epoch": [1, 2]})
    with pytest.raises(ConfigError, match="list of values"):
        raytf.sweep(fast_cfg(), {"train.epochs": 3})


def test_fit_twice_in_one_process(keras_run, fast_cfg, no_leaks):
    """(The first fit: the session's keras_run, trained in this process.)"""
    second = raytf.fit(fast_cfg("run.name=twice-b", "train.epochs=1"), quiet=True)
    assert keras_run.status == second.status == "succeeded"


@pytest.mark.slow  # ~75 s on 2 cores; the same API path (fit twice, a grid sweep) is in the default run
@pytest.mark.timeout(900)
def test_example_notebook_executes(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "examples/sweep.ipynb", as_version=4)
    # Keep the notebook's runs out of the checkout.
    (runs,) = [c for c in nb.cells if "./runs" in c.source]
    runs.source = runs.source.replace("./runs", str(tmp_path))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the learning curves were drawn
    assert len(list(tmp_path.glob("nb-sweep-*/result.json"))) == 4
    # Its training function was defined in a cell: sent by value to every trial's workers, and recorded so.
    for run in tmp_path.glob("nb-sweep-*"):
        assert "entrypoint: <function train defined in __main__>" in (run / "config.yaml").read_text()
        assert json.loads((run / "result.json").read_text())["status"] == "succeeded"


# ~36 s (four trials in a CLI of its own) out of the default run's 20 minutes; the sweep's API path runs by default
# (test_a_failing_trial_is_reported_and_the_others_run), and the section's parsing in tests/core.
@pytest.mark.slow
def test_cli_sweep_section(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "raytf.launch", "conf/sweep.yaml", f"storage.path={tmp_path}", "train.epochs=1",
         "train.steps_per_epoch=3", "cluster.num_workers=1", "ray.num_cpus=2"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln for ln in proc.stdout.splitlines() if "succeeded" in ln]
    assert len(rows) == 4
    assert len(list(tmp_path.glob("lr-batch-*/result.json"))) == 4
