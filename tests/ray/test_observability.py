"""What a run leaves to look at: learning curves (PNG and data), TensorBoard files, the runs CLI."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import raytf
from raytf._driver import figures as plots
from tests.conftest import ROOT, state_address

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def test_curves_tensorboard_and_runs_cli(keras_run, tmp_path):
    result = keras_run
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
    assert out.returncode == 0 and run_dir.name in out.stdout and "succeeded" in out.stdout
    show = subprocess.run([sys.executable, "-m", "raytf.runs", "show", run_dir.name, "--storage", storage],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert show.returncode == 0 and "multi_worker_mirrored" in show.stdout and "rank 1" in show.stdout
    png_out = tmp_path / "c.png"
    made = subprocess.run([sys.executable, "-m", "raytf.runs", "plot", str(run_dir), "-o", str(png_out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert made.returncode == 0 and png_out.read_bytes()[:4] == b"\x89PNG"


# What TensorFlow prints at every task's start on a CPU machine, and what Ray adds when it relays a task's output.
NOISE = ("absl::InitializeLog", "oneDNN custom operations", "Could not find cuda drivers", "cuInit",
         "GeneratorDatasetOp", "WARNING:tensorflow:", "(TaskActor pid=", "[repeated")


def _tf_lines(text: str) -> list[str]:
    """TF's log lines in `text`, prefixed by the driver (`[worker 0] I0000 ...`) or not."""
    from raytf._task.lines import tf_level

    return [line for line in text.splitlines() if tf_level(re.sub(r"^\[\w+ \d+\] ", "", line))]


@pytest.fixture(scope="module")
def io_run(session_ray, tmp_path_factory):
    """One run of tests.train_fns:print_then_train (it prints, writes files in its working and log directories,
    trains) from a driver of its own, a `python -c` that joins the session's Ray with raytf.fit's defaults (Ray's
    log_to_driver on): (its CompletedProcess, its storage, the launch directory's entries before and after). Three
    tests read it: the terminal, the per-rank logs, the files."""
    import os

    session_ray.up()
    storage = tmp_path_factory.mktemp("io-run")
    code = ("import sys, raytf; r = raytf.fit('conf/local.yaml', ['train.epochs=1', 'train.steps_per_epoch=3', "
            f"'storage.path={storage}', 'run.name=notf', 'ray.address={state_address()}', "
            "'checkpoint.export_model=false', 'train.entrypoint=tests.train_fns:print_then_train'], quiet=True); "
            "print(r.status, 'tensorflow' in sys.modules, 'keras' in sys.modules)")
    before = set(os.listdir(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=240)
    return out, storage / "notf", (before, set(os.listdir(ROOT)))


@pytest.mark.timeout(300)
def test_driver_never_imports_tensorflow_and_its_terminal_stays_quiet(io_run, no_leaks):
    """Ray's log_to_driver on (raytf.fit's default, and a user's own ray.init's): the terminal shows rank 0's print
    prefixed, none of TF's start-up lines nor Ray's relay of them (raytf issue 21); the tasks' logs have them all."""
    out, run, _ = io_run
    assert out.stdout.strip().splitlines()[-1] == "succeeded False False", out.stderr[-2000:]
    terminal = out.stdout + out.stderr
    assert [n for n in NOISE if n in terminal] == [] and _tf_lines(terminal) == [], terminal
    assert "[worker 0] hello from worker 0" in out.stdout.splitlines() and "hello from worker 1" not in terminal
    for rank in (0, 1):
        logged = (run / f"logs/worker{rank}-attempt1.log").read_text()
        assert f"hello from worker {rank}" in logged and "absl::InitializeLog" in logged and _tf_lines(logged)


# A CLI run of its own; what --tf-logs shows is lines.Shown's rule, tested
# in tests/core/test_output_lines.py, and a default CLI run's quiet terminal is the test above's.
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_cli_shows_every_ranks_tf_logs_on_request(tmp_path, no_leaks):
    """--tf-logs --all-ranks: every rank's lines, TF's among them, each under its own prefix, none de-duplicated.
    (It joins the session's Ray: what the terminal shows is raytf's, not Ray's.)"""
    out = subprocess.run(
        [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", "--tf-logs", "--all-ranks",
         "run.name=tflogs", f"storage.path={tmp_path}", "train.epochs=1", "train.steps_per_epoch=3",
         f"--address={state_address()}", "checkpoint.export_model=false",
         "train.entrypoint=tests.train_fns:print_then_train"], capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    terminal = out.stdout + out.stderr
    for rank in (0, 1):
        assert f"[worker {rank}] hello from worker {rank}" in out.stdout.splitlines()
        prefix = f"[worker {rank}] "
        shown = [line[len(prefix):] for line in _tf_lines(terminal) if line.startswith(prefix)]
        logged = _tf_lines((tmp_path / f"tflogs/logs/worker{rank}-attempt1.log").read_text())
        assert any("absl::InitializeLog" in line for line in shown) and set(shown) <= set(logged), (shown, logged)
    assert "(TaskActor pid=" not in terminal and "[repeated" not in terminal


def test_per_rank_logs_are_kept(io_run, ps_run):
    out, run, _ = io_run
    assert out.returncode == 0, out.stderr[-2000:]
    for rank in (0, 1):
        text = (run / f"logs/worker{rank}-attempt1.log").read_text()
        assert f"hello from worker {rank}" in text
    names = {p.name for p in (Path(ps_run.run_dir) / "logs").iterdir()}
    # Named by role and task index, as TF names the tasks (/job:ps/task:0), not by raytf's global rank.
    assert {"chief0-attempt1.log", "worker0-attempt1.log", "worker1-attempt1.log", "ps0-attempt1.log"} <= names


def test_a_function_writes_in_a_directory_of_its_own_and_its_log_dir_is_kept(io_run):
    out, run, (before, after) = io_run
    assert out.returncode == 0, out.stderr[-2000:]
    for index in (0, 1):
        notes = (run / f"workdir/worker{index}/notes.txt").read_text()
        assert notes.startswith(f"worker {index} wrote this in ") and str(ROOT) not in notes
        assert (run / f"logs/worker{index}-attempt1/events.txt").read_text() == f"worker {index}\n"
    assert after == before  # nothing landed in the launch directory (the checkout)
