"""Real multi-process MultiWorkerMirroredStrategy runs: 2 TF workers as Ray actors over 127.0.0.1."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import raytf
from raytf._core import timeline as tl
from raytf.errors import PlacementError
from tests import documented
from tests.conftest import ROOT, copy_run, state_address

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def _epoch_rows(df, rank):
    return df[(df["kind"] == "epoch") & (df["rank"] == rank)].sort_values("epoch")


def test_keras_fit_two_workers_then_resume(keras_run, no_leaks, caplog, tmp_path):
    result = keras_run
    s = result.summary
    assert s["num_replicas_in_sync"] == 2
    assert s["strategy"] == "multi_worker_mirrored"
    assert [(t["role"], t["rank"]) for t in s["tasks"]] == [("worker", 0), ("worker", 1)]
    assert all(t["address"].startswith("127.0.0.1:") and t["node_id"] for t in s["tasks"])
    assert s["versions"]["keras"].startswith("tf_keras")
    df = result.metrics
    assert set(df["rank"]) == {0, 1}
    assert {"rank", "epoch", "step", "attempt", "loss", "accuracy", "val_loss"} <= set(df.columns)
    for rank in (0, 1):
        assert list(_epoch_rows(df, rank)["epoch"]) == [1, 2, 3]
    loss = list(_epoch_rows(df, 0)["loss"])
    assert loss[-1] < loss[0]
    steps = df[df["kind"] == "step"]
    # The first step is always reported (launch-to-first-step), then every metrics.every_steps.
    assert sorted(steps[steps["step"] == 1]["rank"]) == [0, 1]
    assert (steps[steps["step"] > 1]["step"] % 4 == 0).all()
    # Step rows are per-replica means, comparable with the epoch rows (not summed over replicas).
    assert df[df["kind"] == "step"]["loss"].max() < 2 * df[df["kind"] == "epoch"]["loss"].max()

    run_dir = Path(result.run_dir)
    on_disk = json.loads((run_dir / "result.json").read_text())
    assert on_disk["status"] == "succeeded" and on_disk["resumed_from"] is None
    assert on_disk["final_metrics"]["epoch"] == 3
    # What the launch spent of its limits, each counted apart (failure.max_failures, max_preemptions, resizes).
    assert on_disk["budget"] == {"failures": 0, "max_failures": 3, "preemptions": 0, "max_preemptions": -1,
                                 "resizes": 0, "max_resizes": 10, "recycles": 0}
    assert pq.read_table(f"{run_dir}/metrics.parquet").num_rows == len(df)
    assert result.last_checkpoint.endswith("-e000003-s0000000024")
    assert "train:" in (run_dir / "config.yaml").read_text()

    # The newest checkpoint's weights change on storage after its commit (one byte: same size): its manifest no
    # longer matches, so the relaunch refuses it, naming it, and resumes from the one before. (On a copy of the
    # run: other tests look at it too.)
    cfg = copy_run(result, tmp_path / "runs")
    newest = tmp_path / "runs" / run_dir.name / "checkpoints" / Path(result.last_checkpoint).name
    data = next(newest.glob("ckpt.data-*"))
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))

    # Relaunch with the same run.name and more epochs: resumes at epoch 3 (epoch 3's checkpoint refused), does
    # not restart. (A second raytf.fit in this process after keras_run's: a session of several fits.)
    again = raytf.fit(raytf.load_config(cfg, ["train.epochs=4"]), quiet=True)
    assert again.status == "succeeded", again.error
    assert again.summary["resumed_from"].endswith("-e000002-s0000000016")
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and newest.name in refused[0] and "SHA-256" in refused[0], refused
    assert [a["attempt"] for a in again.attempts] == [1, 2]
    df2 = again.metrics
    second = df2[df2["attempt"] == 2]
    assert set(second[second["kind"] == "epoch"]["epoch"]) == {3, 4}
    assert second["step"].min() > 16
    assert len(df2[df2["attempt"] == 1]) == len(df)  # the first launch's rows are kept
    assert again.last_checkpoint.endswith("-e000004-s0000000032")


def test_failing_user_function_reports_rank_and_traceback(rank1_fails_run, no_leaks):
    result = rank1_fails_run
    assert result.status == "failed"
    (key, err), = result.error.failures.items()
    assert key == ("worker", 1) and err.rank == 1 and err.role == "worker" and err.node_id
    assert "rank 1 refuses to train" in str(err)
    assert "fail_on_rank1" in err.remote_traceback and "ValueError" in err.remote_traceback
    assert result.summary["error"]["rank"] == 1
    assert result.attempts[-1]["status"] == "failed" and result.attempts[-1]["rank"] == 1
    with pytest.raises(raytf.TrainingFailedError):
        result.raise_for_status()
    # What raytf.fit raised (the fixture's result.error): where the root cause happened, and the run's Result.
    raised = result.error
    assert (raised.rank, raised.role, raised.host, raised.node_id) == (1, "worker", "127.0.0.1", err.node_id)
    assert raised.remote_traceback == err.remote_traceback and raised.result is result
    assert "rank 1 refuses to train" in str(raised)


def test_missing_entrypoint_function_fails_cleanly(fast_cfg, no_leaks):
    result = raytf.fit(fast_cfg("run.name=nofn", "train.entrypoint=tests.train_fns:nope"), quiet=True,
                       raise_on_failure=False)
    assert result.status == "failed"
    assert "has no function 'nope'" in str(result.error)


def test_unsatisfiable_placement_fails_at_once_on_embedded_ray(fast_cfg, no_leaks):
    # A placement timeout far beyond the test's own timeout: passing proves it did not wait for it.
    cfg = fast_cfg("run.name=toobig", "cluster.num_workers=3", "cluster.placement_timeout_s=100000")
    with pytest.raises(PlacementError) as info:
        raytf.fit(cfg, quiet=True)
    msg = str(info.value)
    assert "can never be placed" in msg and "lacks {CPU: 1}" in msg and "cluster.num_workers" in msg
    gpu = fast_cfg("run.name=gpu", "cluster.worker.gpus=1", "cluster.placement_timeout_s=100000")
    with pytest.raises(PlacementError) as info:
        raytf.fit(gpu, quiet=True)
    assert "lacks {GPU: 2}" in str(info.value)
    assert raytf.load_result(str(gpu.storage.path) + "/gpu").status == "failed"


def test_placement_timeout_on_a_cluster_that_could_grow(fast_cfg, no_leaks):
    from raytf._core.plan import make_plan
    from raytf._driver import placement

    plan = make_plan(fast_cfg("cluster.num_workers=3"))
    with pytest.raises(PlacementError) as info:
        placement.reserve(plan, timeout_s=1, name="raytf:grow", can_grow=True)
    msg = str(info.value)
    assert "not ready after cluster.placement_timeout_s=1s" in msg and "lacks {CPU: 1}" in msg


def test_placement_timeout_on_a_busy_cluster_names_who_holds_it(fast_cfg, no_leaks):
    """Another run's group holds the CPUs: the line says what is free and which group holds the rest, by name, and
    never Ray's own resource names (raytf issue 52: `bundle_group_...: 999.999`, `node:__internal_head__`)."""
    from ray.util.placement_group import placement_group, remove_placement_group

    from raytf._core.plan import make_plan
    from raytf._driver import placement

    first = placement_group([{"CPU": 1}] * 2, name="raytf:first")
    assert first.wait(30)
    try:
        with pytest.raises(PlacementError) as info:
            placement.reserve(make_plan(fast_cfg()), timeout_s=1, name="raytf:second", can_grow=True)
    finally:
        remove_placement_group(first)
    msg = str(info.value)
    assert ("only {CPU: 0} of the {CPU: 2} it needs free now, held by placement groups: raytf:first {CPU: 2}"
            in msg), msg
    assert "_group_" not in msg and "node:" not in msg, msg


def _launch(name: str, tmp_path, *overrides: str) -> subprocess.Popen:
    """The CLI on the session's Ray, its output a pipe; SIGINT delivered as a terminal's (see the test above)."""
    import signal

    return subprocess.Popen(
        [sys.executable, "-m", "raytf.launch", "conf/local.yaml", f"run.name={name}", f"storage.path={tmp_path}",
         "checkpoint.export_model=false", "train.params.validation_steps=0", "cluster.standby=0",
         f"ray.address={state_address()}", *overrides],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.slow  # step 2: three runs
def test_a_run_waits_its_turn_behind_another_saying_what_for_and_ctrl_c_while_waiting_leaves_nothing(
        fast_cfg, no_leaks, tmp_path):
    """On a cluster raytf joined, a run whose CPUs another run holds waits its turn (cluster.queue_timeout_s: as
    long as it takes by default), saying what it waits for and who holds it, then trains (raytf issue 52)."""
    import signal
    import threading

    small = ["train.epochs=1", "train.steps_per_epoch=4", "train.entrypoint=tests.train_fns:paced_loop",
             "train.params.step_s=0"]
    behind: dict[str, subprocess.Popen] = {}
    lines: dict[str, list[str]] = {"queued": [], "cancelled": []}

    def follow(name: str) -> None:
        for line in behind[name].stdout:
            lines[name].append(line)
            if name == "cancelled" and " waits (" in line:  # the real signal: it is waiting, in the queue
                behind[name].send_signal(signal.SIGINT)

    def start_behind(e) -> None:
        if e.kind == "step" and not behind:  # the first run holds the CPUs and trains: two more launch
            for name in lines:
                behind[name] = _launch(name, tmp_path, *small)
                threading.Thread(target=follow, args=(name,), daemon=True).start()

    first = fast_cfg("run.name=holder", "train.entrypoint=tests.train_fns:paced_loop", "train.epochs=3",
                     "train.steps_per_epoch=30", "train.params.step_s=0.2")
    try:
        result = raytf.fit(first, quiet=True, on_event=start_behind)
        assert result.status == "succeeded", result.error
        assert behind["cancelled"].wait(60) == 130, "".join(lines["cancelled"])[-3000:]
        assert behind["queued"].wait(180) == 0, "".join(lines["queued"])[-3000:]
    finally:
        for proc in behind.values():
            proc.kill()
    out = "".join(lines["queued"])
    import re

    assert re.search(r"placement group for 2 tasks \(PACK\) waits \([5-9]s so far\): the cluster could hold it but "
                     r"has only \{CPU: 0\} of the \{CPU: 2\} it needs free now, held by placement groups: "
                     r"raytf:holder \{CPU: 2\}", out), out
    assert "placement group for 2 tasks (PACK) placed after" in out, out
    assert json.loads((tmp_path / "queued" / "result.json").read_text())["status"] == "succeeded"
    assert not (tmp_path / "cancelled" / "result.json").exists() or json.loads(
        (tmp_path / "cancelled" / "result.json").read_text())["status"] != "succeeded"


@pytest.mark.slow  # step 2: MultiWorkerMirroredStrategy is every other run's; these build the single-task ones
@pytest.mark.parametrize("strategy", ["mirrored", "central_storage"])
def test_single_task_strategies(fast_cfg, no_leaks, strategy):
    result = raytf.fit(fast_cfg(f"run.name={strategy}", f"cluster.strategy={strategy}", "cluster.num_workers=1",
                                "cluster.worker.cpus=2"), quiet=True)
    assert result.status == "succeeded", result.error
    assert result.summary["strategy"] == strategy
    assert [(t["role"], t["rank"]) for t in result.tasks] == [("worker", 0)]
    loss = list(_epoch_rows(result.metrics, 0)["loss"])
    assert loss[-1] < loss[0] and result.last_checkpoint is not None


def test_events_from_every_rank(fast_cfg, no_leaks):
    import ray

    def named() -> set[str]:  # what any client of the cluster can find by name
        return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}

    # The session's Ray is shared: what earlier tests left named (Ray Data's own actors) is not this run's.
    before = named()
    names: list[list[str]] = []

    def look(event):  # while the run goes
        if not names:
            names.append(sorted(named() - before))

    result = raytf.fit(fast_cfg("run.name=ev", "train.entrypoint=tests.train_fns:report_only",
                                "checkpoint.every_epochs=0"), quiet=True, on_event=look)
    assert result.status == "succeeded", result.error
    # The tasks have names; the event bus has none (another job could drain or stop it: raytf issue 19).
    assert names == [["raytf:ev:worker:0", "raytf:ev:worker:1"]], names
    df = result.metrics
    epochs = df[df["kind"] == "epoch"]
    assert sorted(zip(epochs["rank"], epochs["value"])) == [(0, 0.0), (0, 0.0), (1, 1.0), (1, 1.0)]
    assert set(epochs["replicas"]) == {2.0}
    assert result.checkpoints == []


def test_cli_runs_conf_local_end_to_end(tmp_path):
    """The README's main command (shortened; tests/documented.py), on a Ray of its own as the README runs it: exit 0,
    run dir complete."""
    proc = subprocess.run(
        documented.argv("python -m raytf.launch conf/local.yaml", "--quiet", "run.name=cli",
                        f"storage.path={tmp_path}", "train.epochs=2", "train.steps_per_epoch=5", "ray.num_cpus=2"),
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "raytf: succeeded" in proc.stdout
    run = tmp_path / "cli"
    assert {"config.yaml", "result.json", "metrics.parquet", "checkpoints"} <= {p.name for p in run.iterdir()}
    summary = json.loads((run / "result.json").read_text())
    assert summary["status"] == "succeeded"
    # The cold-launch timeline (raytf issue 38): a CLI run in function mode passes every boundary, in order, from
    # its process's start (the tasks' TF import and strategy from their STARTED events; the driver's from its own).
    timeline = summary["timeline"]
    phases = timeline["phases"]
    assert set(phases) == set(tl.PHASES), set(tl.PHASES) - set(phases)  # (result.json sorts its keys)
    in_order = [tl.PROCESS_START, tl.IMPORTS_DONE, tl.CONFIG_CHECKED, tl.DRIVER_IMPORTED, tl.RAY_READY,
                tl.DRIVER_READY, tl.CODE_CHECKED, tl.PLACEMENT_READY, tl.ACTORS_STARTED, tl.TASKS_ADDRESSED,
                tl.TASK_TF_IMPORT_START, tl.TASK_TF_IMPORTED, tl.TASK_STRATEGY_READY, tl.FIRST_STEP, tl.LAST_STEP,
                tl.TRAINING_END_SEEN, tl.TEARDOWN_DONE, tl.CURVES_WRITTEN, tl.METRICS_WRITTEN, tl.RESULT_WRITTEN]
    assert [phases[p] for p in in_order] == sorted(phases[p] for p in in_order), phases
    assert phases[tl.TASKS_ADDRESSED] <= phases[tl.TASKS_LAUNCHED] <= phases[tl.TRAINING_END_SEEN]
    # Its zero is the process's start: before the run's own start (the driver's), by Python's and raytf's imports.
    # (phases are rounded to the millisecond: the driver's start and DRIVER_READY can be that close)
    assert 0 < summary["started_at"] - timeline["process_started_at"] < phases[tl.DRIVER_READY] + 0.002


def test_cli_failed_run_exits_1(tmp_path, no_leaks):
    """(It joins the session's Ray, as a CLI run on a cluster does; the test above starts its own.)"""
    proc = subprocess.run(
        [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", "run.name=clifail",
         f"storage.path={tmp_path}", "train.entrypoint=tests.train_fns:fail_on_rank1",
         f"ray.address={state_address()}"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1
    assert "worker 1" in proc.stderr and "rank 1 refuses to train" in proc.stderr


def test_interrupt_tears_everything_down_and_a_second_one_skips_the_final_save(fast_cfg, no_leaks, caplog):
    """Ctrl-C in the driver (KeyboardInterrupt raised at an event): a final save is asked for, and a second Ctrl-C
    during it ends the run at once; everything released (no_leaks), status recorded. The run also holds its TF
    servers' ports in cluster.port_range (issue 19), and on an embedded Ray's loopback nothing warns of them."""
    import logging

    from tests.ray.test_port_range import held_block

    held = held_block(4)
    low, high = held[0].getsockname()[1], held[-1].getsockname()[1]
    for s in held:
        s.close()  # free again: the range the run gets
    interrupts = []

    def interrupt_always(e):
        if e.kind in ("step", "heartbeat"):
            interrupts.append(e.payload["step"])
            raise KeyboardInterrupt

    caplog.set_level(logging.INFO, logger="raytf")
    cfg = fast_cfg("run.name=ctrlc", "train.epochs=50", "metrics.every_steps=1", "checkpoint.every_epochs=0",
                   f"cluster.port_range=[{low},{high}]", "train.entrypoint=tests.train_fns:paced_loop",
                   "train.params.step_s=0.05")
    with pytest.raises(KeyboardInterrupt):
        raytf.fit(cfg, quiet=True, on_event=interrupt_always)
    assert len(interrupts) == 2  # the second one, during the final save, ended it
    assert "interrupted: saving a final checkpoint" in caplog.text and "second interrupt" in caplog.text
    result = raytf.load_result(f"{cfg.storage.path}/ctrlc")
    assert result.status == "interrupted"
    assert result.attempts[-1]["status"] == "interrupted"
    tasks = json.loads((Path(result.run_dir) / "result.json").read_text())["tasks"]
    assert len(tasks) == 2 and all(low <= t["port"] <= high for t in tasks), tasks
    assert len({t["port"] for t in tasks}) == 2
    # Every address is 127.0.0.1 (embedded Ray): nothing to warn about.
    assert "TF's gRPC servers accept anyone" not in caplog.text


# Step 1 sends SIGTERM; SIGINT and SIGHUP are step 2's (step 1 took 8:01 against its 8-minute budget). Ctrl-C in the
# driver (the KeyboardInterrupt Python makes of SIGINT) stays in step 1, in-process: the test above.
@pytest.mark.parametrize(("signame", "code"), [pytest.param("SIGINT", 130, marks=pytest.mark.slow), ("SIGTERM", 143),
                                               pytest.param("SIGHUP", 129, marks=pytest.mark.slow)])
def test_cli_signal_saves_exits_128_plus_it_and_releases(tmp_path, no_leaks, signame, code):
    """Ctrl-C, SIGTERM (kill, systemd, Kubernetes, Slurm) and SIGHUP (a closed terminal) end a launch alike: a final
    checkpoint at one agreed step, result.json `interrupted`, exit 128 + the signal (raytf issue 71: Ray's own
    SIGTERM handler, installed by ray.init, exited 15 with no save; SIGHUP left result.json `running`). (It joins
    the session's Ray: the leak check then sees that the interrupted run left nothing on it.)"""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", f"run.name={signame}",
         f"storage.path={tmp_path}", "train.epochs=1000", "train.steps_per_epoch=5",
         "train.entrypoint=tests.train_fns:paced_loop", "train.params.step_s=0.02", f"ray.address={state_address()}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        # A shell without job control starts background commands with SIGINT ignored, and children inherit that
        # (then Python installs no KeyboardInterrupt handler): the launch must see SIGINT as a terminal sends it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:  # wait for a real signal of training progress
            if "epoch 2/1000" in line:  # epoch 1 was checkpointed before epoch 2 began
                break
        proc.send_signal(getattr(signal, signame))
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code, out[-2000:]
    summary = json.loads((tmp_path / signame / "result.json").read_text())
    assert summary["status"] == "interrupted", out[-2000:]
    assert summary["checkpoints"]  # epochs finished before the interrupt stay committed
    assert "saving a final checkpoint" in out, out[-2000:]


@pytest.mark.slow  # step 2: one more run
def test_a_closed_stdout_never_changes_a_succeeded_runs_exit_code(tmp_path, no_leaks):
    """`python -m raytf.launch ... | head -1`: the reader goes after the first line; the run trains and commits, and
    the CLI's last lines, to a closed pipe, are dropped: exit 0 (raytf issue 71: BrokenPipeError, exit 1)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", "run.name=head",
         f"storage.path={tmp_path}", "train.epochs=2", "train.steps_per_epoch=5",
         "train.entrypoint=tests.train_fns:paced_loop", "train.params.step_s=0.02", "cluster.standby=0",
         f"ray.address={state_address()}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        proc.stdout.close()  # (as `head -1` exits)
        _, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert json.loads((tmp_path / "head" / "result.json").read_text())["status"] == "succeeded"
    assert "BrokenPipeError" not in err, err[-2000:]


@pytest.mark.slow  # step 2: its own Ray's start, twice
@pytest.mark.timeout(600)  # (two embedded Rays' starts beside the other side of CI's step 2: ~2 min under load)
def test_cli_sigterm_while_ray_starts_and_a_second_one_while_saving(tmp_path):
    """SIGTERM in a launch's first seconds (its own embedded Ray starting: ray.init's handler would exit 15 with
    Ray's agents left running) stops it once Ray is up, taken down in order: exit 143, nothing left. A second
    SIGTERM during the final save stops at once, with a clean status (raytf issue 71: an abort before, exit -6)."""
    import os
    import shutil
    import signal
    import tempfile
    import time

    from tests.processes import naming

    ray_tmp = tempfile.mkdtemp(prefix="rtf-sig-", dir="/tmp")  # (short: Ray's socket paths live under it)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}

    def launch(name: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", f"run.name={name}",
             f"storage.path={tmp_path}", "train.epochs=1000", "train.steps_per_epoch=5", "cluster.standby=0",
             "train.entrypoint=tests.train_fns:paced_loop", "train.params.step_s=0.02"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**env, "RAY_TMPDIR": ray_tmp})

    early = launch("early")
    try:
        deadline = time.monotonic() + 60
        while not list(Path(ray_tmp).glob("ray/session_*")):  # (Ray is starting: ray.init made its session's dir)
            assert early.poll() is None and time.monotonic() < deadline, "the launch never started Ray"
            time.sleep(0.02)  # (polling for Ray's own sign of starting, bounded)
        early.send_signal(signal.SIGTERM)
        out, _ = early.communicate(timeout=240)
    finally:
        early.kill()
    assert early.returncode == 143, out[-2000:]
    assert naming(ray_tmp) == [], out[-2000:]

    twice = launch("twice")
    try:
        for line in twice.stdout:
            if "epoch 2/1000" in line:
                twice.send_signal(signal.SIGTERM)
            if "saving a final checkpoint" in line:
                twice.send_signal(signal.SIGTERM)
                break
        out, _ = twice.communicate(timeout=240)
    finally:
        twice.kill()
    assert twice.returncode == 143, out[-2000:]
    assert json.loads((tmp_path / "twice" / "result.json").read_text())["status"] == "interrupted"
    assert naming(ray_tmp) == [], out[-2000:]
    shutil.rmtree(ray_tmp, ignore_errors=True)


def _interrupt_once_at(step: int, seen: list[int]):
    """An on_event that raises KeyboardInterrupt (a Ctrl-C in the driver) at the first step row at or past `step`,
    noting that row's step in `seen`."""

    def interrupt_once(e):
        if e.kind == "step" and e.payload["step"] >= step and not seen:
            seen.append(e.payload["step"])
            raise KeyboardInterrupt

    return interrupt_once


@pytest.mark.slow  # step 2: the agreed-step save runs by default (a preemption's, test_fault_tolerance.py)
def test_interrupt_saves_a_final_checkpoint_at_an_agreed_step(fast_cfg, no_leaks, caplog):
    import logging
    import re

    seen: list[int] = []
    interrupt_once = _interrupt_once_at(11, seen)
    cfg = fast_cfg("run.name=final", "train.epochs=50", "train.entrypoint=examples.custom_loop:train",
                   "metrics.every_steps=1")
    with caplog.at_level(logging.WARNING, logger="raytf"), pytest.raises(KeyboardInterrupt):
        raytf.fit(cfg, quiet=True, on_event=interrupt_once)
    agreed = [int(m.group(1)) for r in caplog.records
              if (m := re.fullmatch(r"every task saves at step (\d+), then stops", r.getMessage()))]
    interrupted = raytf.load_result(f"{cfg.storage.path}/final")
    assert interrupted.status == "interrupted"
    last = Path(interrupted.last_checkpoint).name
    step = int(last.split("-s")[1])
    assert len(agreed) == 1 and step == agreed[0] > seen[0]  # the newest checkpoint: the save at the agreed step
    # Relaunch: continues from exactly that step.
    again = raytf.fit(raytf.load_config(cfg, ["train.epochs=3"]), quiet=True)
    assert again.status == "succeeded", again.error
    df = again.metrics
    rows = df[(df["attempt"] == again.attempts[-1]["attempt"]) & (df["kind"] == "step")]
    assert rows["step"].min() == step + 1
    assert again.final_metrics["step"] == 24


@pytest.mark.slow  # step 2 (two runs); a save at an agreed step in step 1 (the preemption's)
@pytest.mark.parametrize("keras", ["tf_keras", "keras"])
def test_keras_fit_resumes_mid_epoch_exactly(fast_cfg, keras, no_leaks):
    """Model.fit interrupted mid-epoch (a save at the agreed step), then relaunched: it resumes at that step, and
    its optimizer has taken exactly as many steps as an uninterrupted run (no epoch's steps trained twice). With
    tf-keras and with Keras 3 (`import keras`: raytf issue 72; Keras 3's fit always starts an epoch at its first
    step)."""
    interrupt_once = _interrupt_once_at(10, [])
    cfg = fast_cfg("run.name=kerasmid", "train.epochs=50", "train.steps_per_epoch=40",
                   "train.entrypoint=tests.train_fns:keras_iterations", "metrics.every_steps=1",
                   f"train.params.keras={keras}")
    with pytest.raises(KeyboardInterrupt):
        raytf.fit(cfg, quiet=True, on_event=interrupt_once)
    saved = int(Path(raytf.load_result(f"{cfg.storage.path}/kerasmid").last_checkpoint).name.split("-s")[1])
    assert 10 < saved < 40  # inside the first epoch
    again = raytf.fit(raytf.load_config(cfg, ["train.epochs=2"]), quiet=True)
    assert again.status == "succeeded", again.error
    df = again.metrics
    rows = df[(df["attempt"] == again.attempts[-1]["attempt"]) & (df["kind"] == "step") & (df["rank"] == 0)]
    assert rows["step"].min() == saved + 1  # the resumed epoch starts after the saved step
    assert again.final_metrics["iterations"] == 80 and again.final_metrics["step"] == 80


def test_a_relaunch_of_a_changed_model_is_refused_before_its_first_step_naming_what_does_not_fit(fast_cfg, no_leaks):
    """A finished run relaunched with a layer added: refused before any step, in one line naming the variables the
    checkpoint lacks and the settings that resume anyway or start afresh; a configuration failure, not retried
    (the partial restore itself and a removed layer: tests/task/test_restore_fit.py)."""
    cfg = fast_cfg("run.name=changed", "train.epochs=1", "train.steps_per_epoch=4",
                   "train.entrypoint=tests.train_fns:keras_iterations")
    assert raytf.fit(cfg, quiet=True).status == "succeeded"
    with pytest.raises(raytf.TrainingFailedError) as refused:
        raytf.fit(raytf.load_config(cfg, ["train.epochs=2", "train.params.extra_layers=1"]), quiet=True)
    error = refused.value
    last = error.result.attempts[-1]  # (attempts are numbered across launches: this launch's one is the second)
    assert (error.root.kind, last["attempt"], last["cause"], last["decision"]) == ("config", 2, "config", "raise")
    line, where = error.root.message.split("\n")  # the line, then where in the program (as for any of its errors)
    assert line.startswith("CheckpointMismatch: ckpt-n00000001-e000001-s0000000004 does not fit the program's model")
    assert "in keras_iterations: ctx.restore(model=model" in where
    assert "the model has 2 variables (model/layer_with_weights-1/kernel, model/layer_with_weights-1/bias)" in line
    assert "checkpoint.partial_restore=true" in line
    df = error.result.metrics
    assert df[(df["attempt"] == error.result.attempts[-1]["attempt"]) & (df["kind"] == "step")].empty  # no step


def test_a_plan_the_cluster_can_never_hold_exits_2_from_a_launch_as_from_a_dry_run(tmp_path, no_leaks, monkeypatch,
                                                                                  capsys):
    """The same plan exits with the same code from --dry-run and from a launch: 2 when the cluster can never hold
    it (a configuration to change), 1 when it was not ready in time (the run failed)."""
    from raytf import launch
    from raytf._driver import signals
    from raytf.api import fit

    monkeypatch.setattr(signals.signal, "signal", lambda *args: None)  # (this process's SIGTERM stays pytest's)
    argv = ["conf/local.yaml", f"storage.path={tmp_path}", f"ray.address={state_address()}", "ray.ship_code=off"]
    for never, code in ((True, 2), (False, 1)):
        def placement_fails(*args, never=never, **kwargs):
            raise PlacementError("placement group for 64 tasks (PACK) can never be placed", never=never)

        monkeypatch.setattr(fit, "_fit", placement_fails)
        assert launch.main([*argv, f"run.name=never{int(never)}"]) == code
        assert "placement group for 64 tasks" in capsys.readouterr().err
    dry = launch.main(["conf/local.yaml", "--dry-run", f"storage.path={tmp_path}", "ray.address=null",
                       "cluster.num_workers=64"])
    assert dry == 2


def test_a_second_launch_of_a_running_run_is_refused_naming_the_first(fast_cfg, no_leaks, tmp_path):
    """Two launches of one run.name (two terminals, a retried job submission): the second is refused in one line
    naming the running launch and the fix, exit 2; the first trains on and keeps its rows (raytf issue 71: both
    trained into one run directory, and the second's end deleted the first's metrics)."""
    import os
    import threading
    import time

    started, go = tmp_path / "started", tmp_path / "go"
    cfg = fast_cfg("run.name=once", "train.entrypoint=tests.train_fns:random_draws", "train.epochs=1",
                   "train.steps_per_epoch=3", "metrics.every_steps=1", f"train.params.started_file={started}",
                   f"train.params.go_file={go}")
    out = {}
    run = threading.Thread(target=lambda: out.setdefault("result", raytf.fit(cfg, quiet=True)))
    run.start()
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert run.is_alive() and time.monotonic() < deadline, "the first launch never trained"
            time.sleep(0.05)  # (polling for the run's own signal, the file, bounded)
        second = subprocess.run(
            [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "run.name=once",
             f"storage.path={cfg.storage.path}", f"ray.address={state_address()}", "cluster.standby=0"],
            cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        go.touch()
        run.join(timeout=120)
    assert second.returncode == 2, second.stderr[-2000:]
    lines = [line for line in second.stderr.splitlines() if line.startswith("raytf:")]
    here = f"another launch is running it (host {os.uname().nodename}, pid {os.getpid()}"
    assert len(lines) == 1 and here in lines[0], second.stderr[-2000:]
    assert "run.name=once-2" in lines[0] and "Traceback" not in second.stderr, second.stderr[-2000:]
    result = out["result"]
    assert result.status == "succeeded" and len(result.metrics[result.metrics["kind"] == "step"]) == 6
