"""Failures mid-run: killed workers, a chief killed mid-commit, hangs, transient user errors."""

import json
import random
import statistics
import time
from pathlib import Path

import pytest

import raytf
from raytf._core import events as ev
from raytf._task import scratch
from raytf._task.upload import UPLOAD_DELAY_ENV
from tests.conftest import state_address

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


class Chaos:
    """Kills a random worker at a random step of each attempt, `kills` times; records commits."""

    def __init__(self, run: str, kills: int, seed: int, workers: int = 2, max_step: int = 30):
        self.run, self.kills_left, self.rng, self.workers = run, kills, random.Random(seed), workers
        self.max_step = max_step
        self.killed: list[tuple[int, int]] = []  # (attempt, rank)
        self.kill_times: list[float] = []
        self.commits: list[tuple[int, str]] = []  # (attempt, checkpoint name)
        self.target = None

    def __call__(self, e: ev.Event) -> None:
        if e.kind == ev.CHECKPOINT:
            self.commits.append((e.attempt, Path(e.payload["uri"]).name))
        if self.kills_left == 0 or e.kind not in (ev.STEP, ev.HEARTBEAT) or e.rank != 0:
            return
        if any(a == e.attempt for a, _ in self.killed):
            return
        if self.target is None or self.target[0] != e.attempt:
            self.target = (e.attempt, e.payload["step"] + self.rng.randint(2, self.max_step))
        if e.payload["step"] >= self.target[1]:
            import ray  # here, not at the top: collecting this module must not load Ray (tests/core checks)

            rank = self.rng.randrange(self.workers)
            ray.kill(ray.get_actor(f"raytf:{self.run}:worker:{rank}"), no_restart=True)
            self.killed.append((e.attempt, rank))
            self.kill_times.append(time.time())
            self.kills_left -= 1


def _check_continuity(result, chaos: Chaos, epochs: int):
    attempts = result.attempts
    assert [a["status"] for a in attempts] == ["failed"] * len(chaos.killed) + ["succeeded"]
    for a, (attempt_no, rank) in zip(attempts, chaos.killed):
        assert a["attempt"] == attempt_no
        assert (a["cause"], a["rank"], a["decision"]) == ("system", rank, "retry"), a
    df = result.metrics
    for a in attempts[1:]:
        # Resumed from the newest checkpoint committed before this attempt started, none lost.
        before = [name for n, name in chaos.commits if n < a["attempt"]]
        assert a["resumed_from"] == (max(before) if before else None)
        rows = df[df["attempt"] == a["attempt"]]
        resumed_step = int(a["resumed_from"].split("-s")[1]) if a["resumed_from"] else 0
        assert rows["step"].min() > resumed_step  # no step before the checkpoint trained again
        epochs_here = sorted(set(rows[rows["kind"] == "epoch"]["epoch"]))
        resumed_epoch = int(a["resumed_from"].split("-e")[1][:6]) if a["resumed_from"] else 0
        if epochs_here:
            assert epochs_here[0] == resumed_epoch + 1  # none skipped
        assert a["recovery_s"] is not None and a["recovery_s"] > 0
    final = df[(df["attempt"] == attempts[-1]["attempt"]) & (df["kind"] == "epoch") & (df["rank"] == 0)]
    assert final["epoch"].max() == epochs
    assert result.final_metrics["step"] == epochs * 5


def chaos_seed() -> int:
    """The kills' seed: $RAYTF_TEST_CHAOS_SEED, else this checkout's commit (so that over the landings the kills
    hit different steps and ranks, and a failure is replayed from its commit), else 11."""
    import os
    import subprocess

    from tests.conftest import ROOT

    if os.environ.get("RAYTF_TEST_CHAOS_SEED"):
        return int(os.environ["RAYTF_TEST_CHAOS_SEED"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return int(head.stdout.strip()[:8], 16) if head.returncode == 0 and head.stdout.strip() else 11


# One chaos run, 3 kills at steps the commit seeds: each retry resumes from the newest commit, no step is trained
# twice or skipped, the killed tasks' scratch goes (killed tasks resume from the last commit in the default run
# too: chief killed mid-commit below; killed hosts in tests/cluster).
@pytest.mark.slow
def test_chaos_three_kills(fast_cfg, no_leaks, capsys):
    seed = chaos_seed()
    chaos = Chaos("chaos", kills=3, seed=seed, max_step=12)
    # 40 steps: attempt k's kill comes at most 12 steps past its first, which is at most one past the newest commit
    # (every 5 steps) before attempt k-1's kill: steps 13, 23, 33 at the latest. (It was 60: 20 steps trained after
    # the last kill, ~15 s of CI's second step.)
    cfg = fast_cfg("run.name=chaos", "train.epochs=8", "train.steps_per_epoch=5", "metrics.every_steps=1",
                   "failure.max_failures=-1", "failure.heartbeat_s=0.2")
    result = raytf.fit(cfg, quiet=True, on_event=chaos)
    assert result.status == "succeeded", f"seed {seed} (RAYTF_TEST_CHAOS_SEED={seed} replays it): {result.error}"
    assert len(chaos.killed) == 3, f"seed {seed}: {chaos.killed}"
    _check_continuity(result, chaos, epochs=8)
    # The killed tasks' scratch directories (checkpoint copies; ray.kill skips their `finally`) are gone too.
    assert scratch.leftovers("chaos") == []
    # Death to training resumed: the kill, to the next attempt's first step.
    resumed = [a["first_step_at"] - t for a, t in zip(result.attempts[1:], chaos.kill_times)]
    lost = [a["steps_lost"] for a in result.attempts[:-1]]
    with capsys.disabled():
        print(f"\nchaos seed {seed}: kills {chaos.killed}; recovery (kill -> first step) median "
              f"{statistics.median(resumed):.2f}s {[round(r, 2) for r in resumed]}; steps lost {lost} (checkpoint "
              "every 5 steps)")


def test_chief_killed_mid_commit_resumes_from_previous_checkpoint(fast_cfg, no_leaks):
    cfg = fast_cfg("run.name=midcommit", "train.epochs=3", "train.entrypoint=tests.train_fns:paced_loop",
                   "train.params.step_s=0", "ray.runtime_env.env_vars.RAYTF_TEST_CRASH_BEFORE_COMMIT='2:1'")
    result = raytf.fit(cfg, quiet=True)
    assert result.status == "succeeded", result.error
    first, second = result.attempts
    assert first["status"] == "failed" and first["rank"] == 0 and first["cause"] == "system"
    assert second["resumed_from"] == "ckpt-n00000001-e000001-s0000000008"  # not the partial epoch-2 upload
    assert result.last_checkpoint.endswith("-e000003-s0000000024")


@pytest.mark.slow  # step 2: the agreed-step save runs in step 1 (a preemption's)
def test_a_task_whose_memory_grows_is_recycled_into_a_fresh_process_losing_no_step(fast_cfg, no_leaks):
    """failure.max_task_rss_gb: rank 1 leaks 64 MiB a step (tests.train_fns:leaks_on_rank1_first_attempt); past the
    limit, every task saves at an agreed step and the group restarts in fresh processes (raytf issue 52)."""
    limit = 1.6
    cfg = fast_cfg("run.name=recycle", "train.epochs=4", "train.steps_per_epoch=10", "metrics.every_steps=1",
                   "train.entrypoint=tests.train_fns:leaks_on_rank1_first_attempt", "train.params.step_s=0.05",
                   f"failure.max_task_rss_gb={limit}", "failure.max_failures=0")
    result = raytf.fit(cfg, quiet=True)
    assert result.status == "succeeded", result.error
    first, second = result.attempts
    assert (first["cause"], first["rank"], first["decision"], first["steps_lost"]) == ("recycle", 1, "retry", 0)
    recycle = first["recycle"]
    assert recycle["saved"] and recycle["rss_gib"] > limit == recycle["limit_gib"] > recycle["start_gib"]
    budget = result.summary["budget"]
    assert budget["recycles"] == 1 and budget["failures"] == budget["preemptions"] == 0  # (max_failures=0)
    df = result.metrics
    steps = df[df["kind"] == "step"]
    saved_at = int(second["resumed_from"].split("-s")[1])
    assert steps[steps["attempt"] == first["attempt"]]["step"].max() == saved_at  # the save: its last step
    assert steps[steps["attempt"] == second["attempt"]]["step"].min() == saved_at + 1  # none lost, none redone
    # Every row carries its task's memory; the fresh process is back under the limit.
    assert steps["rss_gib"].notna().all()
    again = steps[(steps["attempt"] == second["attempt"]) & (steps["rank"] == 1)]["rss_gib"]
    assert again.max() < limit
    assert df[df["kind"] == "epoch"]["epoch"].max() == 4


def test_hang_is_detected_dumped_and_recovered(fast_cfg, no_leaks, caplog):
    """A rank without progress for failure.hang_timeout_s: its stacks dumped, the attempt retried. (With no retry
    left the same error ends the run: the policy's decision, tests/core/test_failure_policy.py.)"""
    import logging

    caplog.set_level(logging.WARNING, logger="raytf")
    cfg = fast_cfg("run.name=hang", "train.entrypoint=tests.train_fns:hang_on_rank1_first_attempt",
                   "failure.hang_timeout_s=6", "failure.heartbeat_s=0.5")
    result = raytf.fit(cfg, quiet=True)
    assert result.status == "succeeded", result.error
    hang = result.attempts[0]
    assert hang["cause"] == "hang" and hang["decision"] == "retry"
    stacks = Path(result.run_dir) / "logs"
    dumps = {p.name: p.read_text() for p in stacks.glob("stacks-attempt1-*.txt")}
    assert "stacks-attempt1-worker1.txt" in dumps
    # py-spy comes with ray[default]: the stuck rank's real Python stack, down to the blocking call. (Found beside
    # the tasks' interpreter, which need not be on PATH: issue 50.)
    assert "hang_on_rank1_first_attempt" in dumps["stacks-attempt1-worker1.txt"]
    assert "Event.wait" in dumps["stacks-attempt1-worker1.txt"]
    # The error names the setting and where the stacks are (what a run with no retry left fails with).
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("attempt 1: worker failed: ")]
    assert any("no progress for 6s (failure.hang_timeout_s); stacks in " in m and "stacks-attempt1-worker" in m
               for m in failed), failed


@pytest.mark.slow  # step 2: a retry runs by default (chief killed mid-commit); transient or not: tests/core
def test_transient_user_errors_are_retried(fast_cfg, no_leaks):
    ok = raytf.fit(fast_cfg("run.name=transient", "train.entrypoint=tests.train_fns:fail_once_after_progress"),
                   quiet=True)
    assert ok.status == "succeeded", ok.error
    assert (ok.attempts[0]["cause"], ok.attempts[0]["rank"], ok.attempts[0]["error_type"]) == ("user", 1, "OSError")


# The decision itself (a bug after progress is retried only with failure.retry_user_errors, which the policy reads
# from the run's config) is tests/core/test_failure_policy.py's, and a retry end to end is the test above's: here,
# that the program's own error reaches the policy as one (its type, after progress) and ends the run unretried.
@pytest.mark.slow
def test_other_user_errors_are_not_retried_unless_asked(fast_cfg, no_leaks):
    bug = "train.entrypoint=tests.train_fns:fail_once_with_a_bug_after_progress"
    no = raytf.fit(fast_cfg("run.name=bug", bug), quiet=True, raise_on_failure=False)
    assert no.status == "failed" and len(no.attempts) == 1
    assert no.attempts[0]["error_type"] == "ValueError" and "not a transient error" in no.attempts[0]["reason"]
    assert "failure.retry_user_errors=true retries it anyway" in no.attempts[0]["reason"]


def test_first_step_failure_is_not_retried(rank1_fails_run, no_leaks):
    result = rank1_fails_run
    assert result.status == "failed" and len(result.attempts) == 1
    assert result.attempts[0]["decision"] == "raise"
    on_disk = json.loads((Path(result.run_dir) / "result.json").read_text())
    assert on_disk["attempts"][0]["reason"].startswith("the training function failed before its first step")


def test_an_error_of_raytfs_own_driver_fails_the_attempt_and_is_retried_with_its_traceback(fast_cfg, no_leaks):
    """An exception raised in the driver's loop while an attempt runs (here by `on_event`, which the loop calls with
    every event) is the attempt's failure, of kind "driver", with its traceback in result.json, and is retried under
    failure.max_failures: the run neither ends unretried nor is left running."""
    raised: list[int] = []

    def on_event(e):
        if e.kind == ev.STEP and not raised:
            raised.append(e.attempt)
            raise RuntimeError("a driver-side bug, on purpose")

    result = raytf.fit(fast_cfg("run.name=driverbug", "train.entrypoint=tests.train_fns:report_only"), quiet=True,
                       on_event=on_event)
    assert result.status == "succeeded", result.error
    assert raised == [1]
    first, second = result.attempts
    assert (first["status"], first["cause"], first["decision"]) == ("failed", "driver", "retry"), first
    assert second["status"] == "succeeded"
    on_disk = json.loads((Path(result.run_dir) / "result.json").read_text())
    assert "RuntimeError: a driver-side bug, on purpose" in on_disk["attempts"][0]["traceback"]
    assert "on_event" in on_disk["attempts"][0]["traceback"]  # where it was raised, not only what


def test_preempted_worker_saves_first_and_nothing_is_lost(fast_cfg, no_leaks, monkeypatch):
    """A SIGTERM to worker 1 (a preemption notice): every task saves at an agreed step, the retry resumes there.
    The run is examples.custom_loop's, whose own properties are checked too (a custom training loop)."""
    import os
    import signal

    from ray.util.state import list_actors

    from raytf._task import actor as task_actor

    sent = []

    def preempt_rank1(e: ev.Event) -> None:
        if e.kind == ev.STEP and e.attempt == 1 and e.rank == 0 and e.payload["step"] >= 6 and not sent:
            (actor,) = list_actors(address=state_address(),
                                   filters=[("name", "=", "raytf:preempt:worker:1"), ("state", "=", "ALIVE")])
            os.kill(actor.pid, signal.SIGTERM)
            sent.append(e.payload["step"])

    # The teardown sweeps the tasks' scratch in this (the driver's) process, which shares their machine: no Ray
    # task for it (each would start a worker process, ~0.7 s a teardown: raytf issue 38).
    # (The teardown's sweep, task_actor.sweep_after, calls these two of its module.)
    swept, sent_sweeps = [], []
    sweep = task_actor.sweep_roots
    monkeypatch.setattr(task_actor, "sweep_roots", lambda roots: (swept.append(roots), sweep(roots)))
    no_ray_task = type("NoRayTask", (), {"options": lambda *a, **k: sent_sweeps.append(k)})
    monkeypatch.setattr(task_actor, "sweep_scratch", no_ray_task)
    cfg = fast_cfg("run.name=preempt", "train.epochs=3", "train.entrypoint=examples.custom_loop:train",
                   "metrics.every_steps=1", "failure.max_failures=0")  # preemptions have their own budget
    result = raytf.fit(cfg, quiet=True, on_event=preempt_rank1)
    assert result.status == "succeeded", result.error
    first, second = result.attempts
    assert (first["cause"], first["rank"], first["decision"]) == ("preempted", 1, "retry")
    assert first["steps_lost"] == 0
    saved_step = int(second["resumed_from"].split("-s")[1])
    assert saved_step > sent[0]
    rows = result.metrics[(result.metrics["attempt"] == second["attempt"]) & (result.metrics["kind"] == "step")]
    assert rows["step"].min() == saved_step + 1
    assert result.final_metrics["step"] == 24

    # The custom loop: both ranks see the same all-reduced loss, which falls; the scratch swept in this process.
    assert swept and sent_sweeps == []
    assert result.summary["num_replicas_in_sync"] == 2
    # (An epoch whose last step was the agreed save's has nothing left to train after the resume: no metrics.)
    epochs = result.metrics[result.metrics["kind"] == "epoch"].dropna(subset=["loss"])
    loss = list(epochs[epochs["rank"] == 0].sort_values("epoch")["loss"])
    assert len(loss) >= 2 and loss[-1] < loss[0]
    assert list(epochs[epochs["rank"] == 1].sort_values("epoch")["loss"]) == pytest.approx(loss)
    # raytf's own variables set by the tasks themselves (plan.actor_env): made without a runtime_env, so on a
    # worker Ray had started ahead (a runtime_env of their own would have each wait for a new one).
    actors = list_actors(address=state_address(), filters=[("class_name", "=", "TaskActor")], detail=True,
                         limit=10_000, raise_on_missing_output=False)
    tasks = [a for a in actors if (a.name or "").startswith("raytf:preempt:")]
    assert len(tasks) == 4 and all("TF_USE_LEGACY_KERAS" not in (a.serialized_runtime_env or "") for a in tasks), \
        [(a.name, a.serialized_runtime_env) for a in tasks]


@pytest.mark.slow  # ~35 s, most of it the slow upload itself
def test_a_slow_upload_is_not_a_hang(fast_cfg, no_leaks):
    """Storage slower than failure.hang_timeout_s: the chief waits for an upload slot (heartbeating) while rank
    1 waits for it in the next all-reduce, silent. Both are healthy: no hang, no restart."""
    cfg = fast_cfg("run.name=slowup", "train.entrypoint=examples.custom_loop:train", "train.epochs=3",
                   "failure.hang_timeout_s=5", "failure.heartbeat_s=0.5", "failure.max_failures=0",
                   "storage.min_upload_mib_s=0.001", f"ray.runtime_env.env_vars.{UPLOAD_DELAY_ENV}=9")
    result = raytf.fit(cfg, quiet=True)
    assert result.status == "succeeded", result.error
    assert [a["status"] for a in result.attempts] == ["succeeded"]
    assert len(result.checkpoints) == 3
