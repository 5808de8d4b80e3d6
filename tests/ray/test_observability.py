"""What a run leaves to look at: learning curves (PNG and data), TensorBoard files, the runs CLI."""

import subprocess
import sys
from pathlib import Path

import pytest

import raytf
from raytf._core import figures as plots
from tests.conftest import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def test_curves_tensorboard_and_runs_cli(fast_cfg, no_leaks, tmp_path):
    result = raytf.fit(fast_cfg("run.name=obs", "train.epochs=3"), quiet=True)
    assert result.status == "succeeded", result.error
    run_dir = Path(result.run_dir)

    # The curves' data: per epoch, the mean over ranks of the epoch rows.
    curves = plots.learning_curves(result.metrics_table)
    epochs = result.metrics[result.metrics["kind"] == "epoch"]
    assert list(curves.index) == [1, 2, 3]
    assert curves["loss"].tolist() == pytest.approx(epochs.groupby("epoch")["loss"].mean().tolist())
    assert {"loss", "val_loss", "accuracy", "val_accuracy"} <= set(curves.columns)
    # The PNG written with the run is a real image; the figure draws exactly that data.
    png = (run_dir / plots.CURVES_FILE).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    fig = raytf.plot(str(run_dir))
    loss_ax = next(ax for ax in fig.axes if ax.get_title() == "loss")
    lines = {line.get_label(): line for line in loss_ax.get_lines()}
    assert lines["train"].get_ydata().tolist() == pytest.approx(curves["loss"].tolist())
    assert lines["validation"].get_ydata().tolist() == pytest.approx(curves["val_loss"].tolist())

    # TensorBoard: one directory per rank with that rank's scalars.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for rank in (0, 1):
        acc = EventAccumulator(str(run_dir / "tensorboard" / f"worker{rank}"))
        acc.Reload()
        tags = acc.Tags()["scalars"]
        assert {"epoch/loss", "epoch/val_accuracy", "step/loss"} <= set(tags)
        assert [e.step for e in acc.Scalars("epoch/loss")] == [8, 16, 24]

    # python -m raytf.runs
    storage = str(run_dir.parent)
    out = subprocess.run([sys.executable, "-m", "raytf.runs", "ls", storage], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 0 and "obs" in out.stdout and "succeeded" in out.stdout
    show = subprocess.run([sys.executable, "-m", "raytf.runs", "show", "obs", "--storage", storage],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert show.returncode == 0 and "multi_worker_mirrored" in show.stdout and "rank 1" in show.stdout
    png_out = tmp_path / "c.png"
    made = subprocess.run([sys.executable, "-m", "raytf.runs", "plot", str(run_dir), "-o", str(png_out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert made.returncode == 0 and png_out.read_bytes()[:4] == b"\x89PNG"


def test_driver_never_imports_tensorflow(tmp_path):
    code = ("import sys, raytf; r = raytf.fit('conf/local.yaml', ['train.epochs=1', 'train.steps_per_epoch=3', "
            f"'storage.path={tmp_path}', 'run.name=notf', 'ray.num_cpus=2'], quiet=True); "
            "print(r.status, 'tensorflow' in sys.modules, 'keras' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert out.stdout.strip().splitlines()[-1] == "succeeded False False", out.stderr[-2000:]


def test_per_rank_logs_are_kept(fast_cfg, ps_cfg, no_leaks):
    result = raytf.fit(fast_cfg("run.name=logs", "train.entrypoint=tests.train_fns:print_rank"), quiet=True)
    assert result.status == "succeeded", result.error
    logs = Path(result.run_dir) / "logs"
    for rank in (0, 1):
        text = (logs / f"worker{rank}-attempt1.log").read_text()
        assert f"hello from worker {rank}" in text
    ps = raytf.fit(ps_cfg("run.name=pslogs", "train.epochs=1"), quiet=True)
    assert ps.status == "succeeded", ps.error
    names = {p.name for p in (Path(ps.run_dir) / "logs").iterdir()}
    # Named by role and task index, as TF names the tasks (/job:ps/task:0), not by raytf's global rank.
    assert {"chief0-attempt1.log", "worker0-attempt1.log", "worker1-attempt1.log", "ps0-attempt1.log"} <= names


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_a_function_writes_in_a_directory_of_its_own_and_its_log_dir_is_kept(fast_cfg, tmp_path, no_leaks):
    import os

    before = set(os.listdir(ROOT))
    result = raytf.fit(fast_cfg("run.name=outputs", "train.entrypoint=tests.train_fns:write_outputs"), quiet=True)
    assert result.status == "succeeded", result.error
    run = Path(result.run_dir)
    for index in (0, 1):
        notes = (run / f"workdir/worker{index}/notes.txt").read_text()
        assert notes.startswith(f"worker {index} wrote this in ") and str(ROOT) not in notes
        assert (run / f"logs/worker{index}-attempt1/events.txt").read_text() == f"worker {index}\n"
    assert set(os.listdir(ROOT)) == before  # nothing landed in the launch directory (the checkout)
