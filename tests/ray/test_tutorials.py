"""Real programs, written the way TensorFlow's distributed tutorials and the well-known blog examples write
theirs, run as scripts: what they read back after a resume, several fits, errors after training."""

from pathlib import Path

import pytest

import raytf
from tests import documented


def _rows(result, column):
    df = result.metrics
    return df[df[column].notna()] if column in df else df.iloc[0:0]


@pytest.mark.slow  # step 2: a kill and a resume of a script (~35 s)
@pytest.mark.ray
@pytest.mark.timeout(300)
def test_every_replica_reads_the_same_latest_checkpoint_after_a_resume(script_cfg, no_leaks):
    """TF's guide resumes with model.load_weights(tf.train.latest_checkpoint(dir)) and reloads the last checkpoint
    before saving: every worker must find the same one, not the one its directory was restored with."""
    cfg = script_cfg("run.name=replicas", "train.script=tests/scripts/replica_weights.py",
                     "train.args=['{checkpoint_dir}']")
    result = raytf.fit(cfg, quiet=True)
    assert result.status == "succeeded", result.error
    assert [a["cause"] for a in result.attempts] == ["system", None]  # worker 1 killed, then resumed
    start, end = _rows(result, "w_start"), _rows(result, "w_end")
    resumed = start[start["attempt"] == 2]
    assert sorted(resumed["rank"]) == [0, 1] and resumed["restored_epoch"].min() > 0
    assert resumed["w_start"].nunique() == 1 and resumed["restored_epoch"].nunique() == 1
    # After fit, each replica's latest_checkpoint: the same weights everywhere (worker 1 used to read the epoch
    # it was restored with, the chief its newest).
    final = end[end["attempt"] == 2]
    assert sorted(final["rank"]) == [0, 1] and final["w_end"].nunique() == 1, final[["rank", "w_end"]]


@pytest.mark.slow  # step 2: a kill, a retry and a failure of a script (~30 s)
@pytest.mark.ray
@pytest.mark.timeout(300)
def test_several_fits_a_retry_then_an_error_after_training(script_cfg, no_leaks):
    """Train, then fine-tune in a second Model.fit; worker 1 dies in the second fit; the retry runs the program
    again from its start. The retry's checkpoints are the newest, whatever epoch they name: resumed from, kept
    by pruning, reported as the last; the metrics say which fit each row came from. Then the program's own code
    after training raises KeyError (a plotting bug): the run fails, and training is not run a third time."""
    cfg = script_cfg("run.name=two-fits", "train.script=tests/scripts/two_fits.py", "checkpoint.keep_last=3",
                     "train.args=['{checkpoint_dir}',--kill,--fail-after]")
    result = raytf.fit(cfg, quiet=True, raise_on_failure=False)
    assert result.status == "failed" and [a["cause"] for a in result.attempts] == ["system", "user"]
    names = [Path(c).name for c in result.checkpoints]
    # Attempt 2's four epochs (two per fit, counted on: 1..4) committed after attempt 1's: kept, in that order.
    assert len(names) == 3 and names == sorted(names), names
    assert result.last_checkpoint == result.checkpoints[-1] and names[-1].endswith("-e000004-s0000000020")
    assert result.summary["last_checkpoint"].endswith(names[-1])
    df = result.metrics
    epochs = df[(df["kind"] == "epoch") & (df["rank"] == 0) & (df["attempt"] == 2)]
    assert list(epochs["epoch"]) == [1, 2, 3, 4] and list(epochs["fit"]) == [1, 1, 2, 2]
    assert result.final_metrics["epoch"] == 4
    after = result.attempts[1]
    assert (after["error_type"], after["decision"], after["training_finished"]) == ("KeyError", "raise", True)
    assert "last epoch" in after["reason"]
    assert "KeyError: 'val_accuracy'" in str(result.error)


@pytest.mark.ray
@pytest.mark.timeout(300)
@pytest.mark.slow  # step 2: a script that builds a one-task strategy, refused (one message, two programs)
@pytest.mark.parametrize("program", ["fit", "loop"])
def test_a_strategy_that_does_not_span_the_cluster_fails_the_run(script_cfg, program, no_leaks):
    """MirroredStrategy on 2 workers: two unsynchronised copies. Keras fit says so by its replica count (the run
    stops at the first fit); a custom loop by never connecting to the other task (found when it ends)."""
    args = "[--loop]" if program == "loop" else "[]"
    result = raytf.fit(script_cfg(f"run.name=mirrored-{program}", "train.script=tests/scripts/mirrored.py",
                                  f"train.args={args}"), quiet=True, raise_on_failure=False)
    assert result.status == "failed" and len(result.attempts) == 1
    a = result.attempts[0]
    assert (a["cause"], a["error_type"], a["decision"]) == ("user", "ClusterNotUsed", "raise")
    message = str(result.error)
    assert "does not span the cluster" in message and "MultiWorkerMirroredStrategy()" in message
    assert "cluster.num_workers=1" in message
    if program == "fit":
        assert "1 replica(s) in sync on a cluster of 2 workers" in message
    else:
        assert "never connected to another task of its cluster" in message


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_ps_tutorials_in_process_cluster_is_refused(script_cfg, no_leaks):
    cfg = script_cfg("run.name=ps-in-process", "cluster.strategy=parameter_server", "cluster.num_ps=1",
                     "cluster.chief.cpus=0.5", "cluster.worker.cpus=0.5", "cluster.ps.cpus=0.5",
                     "cluster.threads=4",  # its in-process servers run in the chief's process: they need threads
                     "train.script=tests/scripts/ps_in_process.py", "train.args=[]")
    result = raytf.fit(cfg, quiet=True, raise_on_failure=False)
    assert result.status == "failed" and len(result.attempts) == 1
    assert result.attempts[0]["error_type"] == "ClusterNotUsed", result.error
    assert "started Model.fit without a connection to another task of its cluster" in str(result.error)


@pytest.mark.slow  # step 2: one more message for a misused script
@pytest.mark.ray
@pytest.mark.timeout(300)
def test_tensorflow_used_before_the_strategy_is_explained(script_cfg, no_leaks):
    result = raytf.fit(script_cfg("run.name=tf-first", "train.script=tests/scripts/tf_before_strategy.py",
                                  "train.args=[]"), quiet=True, raise_on_failure=False)
    assert result.status == "failed" and len(result.attempts) == 1
    message = str(result.error)
    assert "Collective ops must be configured at program startup" in message
    assert "Fix: the program used TensorFlow" in message and "build the strategy first" in message


def _tutorial_keras(tmp_path, epochs):
    return documented.config(
        "python -m raytf.launch conf/tutorial_keras.yaml", f"storage.path={tmp_path / 'runs'}", "run.name=tutorial",
        "metrics.flush_interval_s=0",
        f"train.args=[--epochs,'{epochs}',--steps-per-epoch,'10',--checkpoint-dir,'{{checkpoint_dir}}/ckpt',"
        "--backup-dir,'{checkpoint_dir}/backup',--log-dir,'{log_dir}']")


def _check_tutorial_keras_run(result):
    assert result.status == "succeeded", result.error
    assert result.summary["num_replicas_in_sync"] == 2
    run = Path(result.run_dir)
    assert (run / "workdir/worker0/saved_model/saved_model.pb").exists()  # the chief's model.save
    assert not (run / "workdir/worker1/saved_model").exists()  # the other's temporary copy, deleted by the program
    assert (Path(result.checkpoints[-1]) / "ckpt" / "checkpoint").exists()
    assert list((run / "logs/worker0-attempt1").rglob("events.out.tfevents.*"))  # its TensorBoard callback


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_keras_tutorial_runs_unmodified_and_a_relaunch_resumes_on_every_worker(tmp_path, no_leaks):
    """examples/tutorial_keras.py as TF's multi-worker Keras tutorial writes it, run by conf/tutorial_keras.yaml:
    trains on both workers; its model, saved the tutorial's way, lands in the chief's working directory. A relaunch
    of the same run.name: every worker's load_weights(latest_checkpoint) finds the same checkpoint."""
    first = raytf.fit(_tutorial_keras(tmp_path, 2), quiet=True)
    _check_tutorial_keras_run(first)
    run = Path(first.run_dir)
    again = raytf.fit(_tutorial_keras(tmp_path, 3), quiet=True)
    assert again.status == "succeeded", again.error
    assert again.summary["resumed_from"] == first.checkpoints[-1]
    for worker in (0, 1):  # every task found the same checkpoint, worker 1 included
        log = (run / f"logs/worker{worker}-attempt2.log").read_text()
        assert "restored weights from" in log and "ckpt-002" in log
    # (BackupAndRestore deletes its backup when fit completes: the program starts fit at epoch 1 again, from the
    # weights it loaded. That is the tutorial's logic; raytf numbers the new checkpoints after the old ones.)
    assert again.checkpoints[-1] > first.checkpoints[-1]


@pytest.mark.ray
@pytest.mark.slow  # step 2 (a custom loop's CheckpointManager saves; their relaunch: the orbit-style test below)
@pytest.mark.timeout(300)
def test_the_custom_loop_tutorial_commits_its_checkpoint_manager_saves(tmp_path, no_leaks):
    """examples/tutorial_ctl.py saves with a tf.train.CheckpointManager (the chief into the real directory, worker 1
    into a temporary one it deletes) and reports nothing to raytf: each save on the chief is committed all the same,
    as a checkpoint a resume restores (its state file naming it). Every worker resuming from the last commit after
    a relaunch: the orbit-style loop's test below (the same CheckpointManager path, ~15 s of CI's second step)."""
    cfg = documented.config(
        "python -m raytf.launch conf/tutorial_ctl.yaml", f"storage.path={tmp_path / 'runs'}", "run.name=ctl",
        "metrics.flush_interval_s=0",
        "train.args=[--epochs,'2',--steps-per-epoch,'5',--checkpoint-dir,'{checkpoint_dir}']")
    first = raytf.fit(cfg, quiet=True)
    assert first.status == "succeeded", first.error
    assert len(first.checkpoints) == 2  # one per epoch's CheckpointManager.save
    last = Path(first.checkpoints[-1])
    assert "ckpt-2" in (last / "checkpoint").read_text() and (last / "ckpt-2.index").exists()
    log = (Path(first.run_dir) / "logs/worker1-attempt1.log").read_text()
    assert "Epoch: 2," in log  # (worker 1 trained both epochs beside the chief)


@pytest.mark.ray
@pytest.mark.slow  # step 2, with its relaunch
@pytest.mark.timeout(300)
def test_an_orbit_style_loop_is_committed_by_its_global_step_and_its_summaries_are_its_metrics(tmp_path, no_leaks):
    """examples/orbit_style.py (conf/orbit_style.yaml), written as orbit and the Model Garden write their loops:
    asynchronous CheckpointManager saves numbered by the global step, tf.summary scalars, no Keras fit and no
    raytf.report. Each committed checkpoint is named by its step and holds that checkpoint; every worker's scalars
    are its rows at their steps; a relaunch resumes every worker from the last one (raytf issue 55)."""
    cfg = documented.config("python -m raytf.launch conf/orbit_style.yaml", f"storage.path={tmp_path / 'runs'}",
                            "run.name=orbit", "metrics.flush_interval_s=0")
    first = raytf.fit(cfg, quiet=True)
    assert first.status == "succeeded", first.error
    # Saves at steps 10 (the first), 30, 50 (every 20 after it) and 60 (at the end); storage.keep_last=3.
    assert [Path(c).name[-11:] for c in first.checkpoints] == ["s0000000030", "s0000000050", "s0000000060"]
    assert (Path(first.checkpoints[-1]) / "ckpt-60.index").exists()
    df = first.metrics
    for rank in (0, 1):
        rows = df[df["rank"] == rank]
        assert list(rows["step"]) == [10, 20, 30, 40, 50, 60] and rows["train/training_loss"].notna().all()
    assert first.final_metrics["step"] == 60 and "train/learning_rate" in first.final_metrics
    assert first.attempts[0]["steps_lost"] is None  # (nothing lost, and raytf counted no step of its own)

    again = raytf.fit(raytf.load_config(cfg, ["train.args=[--model-dir,'{checkpoint_dir}',--train-steps,'80']"]),
                      quiet=True)
    assert again.status == "succeeded", again.error
    assert again.summary["resumed_from"] == first.checkpoints[-1]
    for worker in (0, 1):
        assert "starting at step 60" in (Path(again.run_dir) / f"logs/worker{worker}-attempt2.log").read_text()
    later = again.metrics[again.metrics["attempt"] == 2]
    assert sorted(later["step"]) == [70, 70, 80, 80] and Path(again.checkpoints[-1]).name.endswith("s0000000080")


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_training_functions_second_fit_counts_on(fast_cfg, no_leaks):
    result = raytf.fit(fast_cfg("run.name=fine-tune", "train.entrypoint=tests.train_fns:fit_then_fine_tune"),
                       quiet=True)
    assert result.status == "succeeded", result.error
    df = result.metrics
    epochs = df[(df["kind"] == "epoch") & (df["rank"] == 0)]
    assert list(epochs["epoch"]) == [1, 2, 3] and list(epochs["fit"]) == [1, 1, 2]  # not 1, 2, 1
    names = [Path(c).name for c in result.checkpoints]
    assert names[-1].endswith("-e000003-s0000000024") and names == sorted(names)
    assert result.final_metrics["epoch"] == 3


@pytest.mark.ray
@pytest.mark.slow  # step 2: a run and its retry
@pytest.mark.timeout(400)
def test_a_scripts_backup_under_its_checkpoint_directory_is_committed_whole_and_a_retry_restores_it(tmp_path,
                                                                                                       no_leaks):
    """The Keras tutorial with its ModelCheckpoint's state file at the top of $RAYTF_CHECKPOINT_DIR and its
    BackupAndRestore under it: a commit holds both directories' newest checkpoints whole, so that after worker 1 is
    killed the retry's BackupAndRestore restores and the run finishes (raytf issue 71: the backup's state file was
    committed without the ckpt it names; the retry failed with NotFoundError, classified the program's)."""
    from tests.conftest import kill_at_a_commit_before

    killed: list[int] = []
    epochs = 8

    cfg = documented.config(
        "python -m raytf.launch conf/tutorial_keras.yaml", f"storage.path={tmp_path / 'runs'}", "run.name=backup",
        "metrics.flush_interval_s=0",
        f"train.args=[--epochs,'{epochs}',--steps-per-epoch,'10',--checkpoint-dir,'{{checkpoint_dir}}',"
        "--backup-dir,'{checkpoint_dir}/backup',--log-dir,'{log_dir}']")
    result = raytf.fit(cfg, quiet=True, on_event=kill_at_a_commit_before(epochs, "raytf:backup:worker:1", killed))
    assert killed, f"no commit was seen before epoch {epochs}'s"
    assert result.status == "succeeded", result.error
    assert len(result.attempts) == 2, result.attempts
    # Every commit that holds the backup's state file holds the checkpoint it names (BackupAndRestore removes its
    # backup once fit ends: the last commits may hold none).
    backups = [b for c in result.checkpoints if ((b := Path(c) / "backup" / "chief") / "checkpoint").exists()]
    assert backups, result.checkpoints
    for b in backups:
        named = (b / "checkpoint").read_text().split('"')[1].rsplit("/", 1)[-1]
        assert (b / f"{named}.index").exists(), sorted(p.name for p in b.iterdir())
