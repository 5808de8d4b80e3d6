"""Sweeps through Ray Tune, and the example notebook that runs one."""

import json

import pytest

import raytf
from raytf.errors import ConfigError
from tests.conftest import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


def test_a_failing_trial_is_reported_and_the_others_run(fast_cfg, no_leaks):
    # A value that fails its trial's config is reported, not dropped; the other trials still run.
    cfg = fast_cfg("train.epochs=1", "train.steps_per_epoch=4", "train.entrypoint=tests.train_fns:report_only")
    bad = raytf.sweep(cfg, space={"train.batch_size": [16, -4]}, max_concurrent=2, name="bad")
    assert len(bad) == 2
    failed = bad[bad["train.batch_size"] == -4].iloc[0]
    assert failed["status"] == "failed" and "train.batch_size" in failed["error"]
    assert bad[bad["train.batch_size"] == 16].iloc[0]["status"] == "succeeded"


def test_misspelt_key_fails_before_any_trial(fast_cfg):
    with pytest.raises(ConfigError, match="Did you mean"):
        raytf.sweep(fast_cfg(), space={"train.epoch": [1, 2]})
    with pytest.raises(ConfigError, match="list of values"):
        raytf.sweep(fast_cfg(), space={"train.epochs": 3})


@pytest.mark.slow  # the same API path (a sweep of two trials, one failing) is in the default run
@pytest.mark.timeout(900)
def test_example_notebook_executes(tmp_path, ray_local, no_leaks):
    """examples/sweep.ipynb as shipped (a grid of trials of a function defined in a cell, the table, the best
    trial's curves), in a kernel of its own that joins the session's Ray (the notebook's ray.init-less raytf.sweep
    would start a Ray of its own)."""
    import nbformat
    from nbclient import NotebookClient

    from tests.conftest import state_address

    nb = nbformat.read(ROOT / "examples/sweep.ipynb", as_version=4)
    # Keep the notebook's runs out of the checkout; its kernel joins this session's Ray.
    (runs,) = [c for c in nb.cells if "./runs" in c.source]
    runs.source = runs.source.replace("./runs", str(tmp_path)).replace(
        '"storage.path=', f'"ray.address={state_address()}", "checkpoint.export_model=false", "storage.path=')
    # Two of its four trials: the sweeps' path (trials queued two at a time, each a full run) is the same for four
    # (~65 s of CI's second step). The CLI's sweep section: docs/notebooks.md's block (test_docs_snippets_train.py);
    # trials of two sizes: test_tracking.py's sweep.
    runs.source = runs.source.replace('"train.batch_size": [16, 32]', '"train.batch_size": [32]')
    assert state_address() in runs.source and '"train.batch_size": [32]' in runs.source
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the learning curves were drawn
    assert len(list(tmp_path.glob("nb-sweep-*/result.json"))) == 2
    # Its training function was defined in a cell: sent by value to every trial's workers, and recorded so.
    for run in tmp_path.glob("nb-sweep-*"):
        assert "entrypoint: <function train defined in __main__>" in (run / "config.yaml").read_text()
        assert json.loads((run / "result.json").read_text())["status"] == "succeeded"
