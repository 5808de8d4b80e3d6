"""A long run, watched (raytf issue 33): does anything grow or pile up?

Run:  python -m benchmarks.soak --minutes 30
      python -m benchmarks.soak --smoke          (~25 s of training: the CI check that it runs)

The benchmark job (benchmarks/workload.py's CNN) on 2 MWMS workers, launched with `raytf.fit` on an embedded Ray of
the benchmark's own, a checkpoint every `--checkpoint-steps` steps (400: ~10 s at the ~25 ms a step takes on a quiet
2-core machine; the report gives the interval it got) and a metrics row every step from every rank. After
`--minutes` the job is told to stop at the end of an epoch two epochs on (a file both ranks read at each epoch's
start: they stop at the same step), so the run ends as a long one does: succeeded, torn down, its Ray shut down.

Reported, with whether each target holds:
  - RSS of the driver (this process) and of each task process, sampled every `--sample-s`: at its first sample, after
    warm-up (the first sample past 10 % of the run: TF's allocator and the traced graphs have settled) and at the
    end; target: growth from warm-up to the end < 10 %;
  - checkpoint commit latency (rank 0's step row of step S -> the commit event of step S's checkpoint, both on the
    task's clock) per tenth of the run; target: flat (the last third's median within 25 % or 50 ms of the first
    third's);
  - what is left in the temporary directories: the tasks' (every Ray process of the run is given one of the
    benchmark's own, TMPDIR) and the driver's (this process's `tempfile.tempdir`, one of the benchmark's too),
    counted whole after the run and its Ray are gone, autograph's files by name; target: zero. (/tmp's own raytf-*
    and autograph entries are shown too, for what other programs on the machine may add.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float | None:
    """A process's resident set (VmRSS), MiB; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def train(ctx) -> None:
    """The soak's training function: the benchmark job under Keras fit, stopping at the end of the epoch the file
    `params.stop_file` names (read at each epoch's start by every rank); writes its pid for the sampler."""
    import tensorflow as tf

    from benchmarks.workload import build_model, dataset

    Path(ctx.params["out"], f"pid-{ctx.rank}-a{ctx.attempt}").write_text(str(os.getpid()))
    with ctx.strategy.scope():
        model = build_model(tf)
    ctx.restore(model=model, optimizer=model.optimizer)
    stop_file = ctx.params["stop_file"]

    class StopAt(tf.keras.callbacks.Callback):
        stop_after = None

        def on_epoch_begin(self, epoch, logs=None):
            if self.stop_after is None and os.path.exists(stop_file):
                self.stop_after = int(Path(stop_file).read_text())

        def on_epoch_end(self, epoch, logs=None):
            if self.stop_after is not None and epoch + 1 >= self.stop_after:
                self.model.stop_training = True

    model.fit(dataset(tf, ctx.global_batch_size), epochs=ctx.epochs, initial_epoch=ctx.initial_epoch,
              steps_per_epoch=ctx.steps_per_epoch, verbose=0, callbacks=[*ctx.keras_callbacks(), StopAt()])


KEEP_STEPS = 2000  # rank 0's last rows kept: a commit comes well within them (at ~40 steps/s, 50 s)


class Watch:
    """The run's events (step rows of rank 0, commits, completed epochs) and the processes' RSS, sampled."""

    def __init__(self, out: Path, sample_s: float) -> None:
        self.out, self.sample_s = out, sample_s
        # rank 0's step -> when its row was made: the last KEEP_STEPS steps only (a commit comes seconds after its
        # step), else this process's RSS, which the soak measures, would grow by the benchmark's own record.
        self.step_at: dict[int, float] = {}
        self.last_step = 0
        self.commits: list[tuple[float, int, float]] = []  # (when, step, latency s)
        self.epoch = 0
        self.rss: dict[str, list[tuple[float, float]]] = {}  # "driver" / "rank 0" ... -> [(t, MiB)]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="soak-sampler")

    def on_event(self, e) -> None:
        if e.kind == "step" and e.rank == 0:
            step = int(e.payload["step"])
            self.step_at[step] = e.time
            self.last_step = max(self.last_step, step)
            if len(self.step_at) > 2 * KEEP_STEPS:
                self.step_at = {s: t for s, t in self.step_at.items() if s > self.last_step - KEEP_STEPS}
        elif e.kind == "epoch" and e.rank == 0:
            self.epoch = max(self.epoch, int(e.payload["epoch"]))
        elif e.kind == "checkpoint":
            step = int(e.payload["step"])
            if step in self.step_at:
                self.commits.append((e.time, step, e.time - self.step_at[step]))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self.sample_s):
            now = time.time()
            self.rss.setdefault("driver", []).append((now, rss_mib(os.getpid())))
            for f in sorted(self.out.glob("pid-*")):
                rank = f.name.split("-")[1]
                value = rss_mib(int(f.read_text()))
                if value is not None:
                    self.rss.setdefault(f"rank {rank}", []).append((now, value))


def _tmp_entries(tmp: Path) -> list[str]:
    return sorted(os.listdir(tmp))


def _autograph(where: Path) -> int:
    return sum(1 for _ in where.rglob("__autograph_generated_file*"))


def _real_tmp() -> dict[str, int]:
    real = Path("/tmp")
    names = os.listdir(real)
    return {"raytf-*": sum(n.startswith("raytf-") for n in names),
            "__autograph_generated_file*": sum(n.startswith("__autograph_generated_file") for n in names)}


def report(w: Watch, began: float, ended: float, left: list[str], autograph_left: int, real_before: dict[str, int],
           real_after: dict[str, int], result) -> bool:
    span = ended - began
    holds = []
    print(f"\nrun: {result.status}, {len(result.attempts)} attempt(s), {span / 60:.1f} min of training, "
          f"{w.last_step} steps, {len(w.commits)} checkpoints committed")
    print("\n| process | RSS MiB first | after warm-up | end | growth after warm-up | < 10 % |")
    print("|---|---|---|---|---|---|")
    for who, series in sorted(w.rss.items()):
        series = [(t, v) for t, v in series if v is not None]
        if not series:
            continue
        warm = next((v for t, v in series if t - began >= 0.1 * span), series[-1][1])
        end = series[-1][1]
        growth = (end - warm) / warm if warm else 0.0
        holds.append(growth < 0.10)
        print(f"| {who} | {series[0][1]:.0f} | {warm:.0f} | {end:.0f} | {100 * growth:+.1f} % | "
              f"{'yes' if growth < 0.10 else 'NO'} |")
    if w.commits:
        intervals = [b[0] - a[0] for a, b in zip(w.commits, w.commits[1:])]
        print(f"\ncheckpoints: every {statistics.median(intervals) if intervals else 0:.1f} s (median); commit "
              "latency (rank 0's row of the step -> its commit), per tenth of the run:")
        print("| tenth | commits | median s | max s |")
        print("|---|---|---|---|")
        for i in range(10):
            lo, hi = began + i * span / 10, began + (i + 1) * span / 10
            part = [lat for t, _, lat in w.commits if lo <= t < hi or (i == 9 and t >= hi)]
            if part:
                print(f"| {i + 1} | {len(part)} | {statistics.median(part):.3f} | {max(part):.3f} |")
        third = max(1, len(w.commits) // 3)
        first = statistics.median(lat for _, _, lat in w.commits[:third])
        last = statistics.median(lat for _, _, lat in w.commits[-third:])
        flat = last <= max(1.25 * first, first + 0.05)
        holds.append(flat)
        print(f"commit latency: first third {first:.3f} s, last third {last:.3f} s: flat (within 25 % or 50 ms): "
              f"{'yes' if flat else 'NO'}")
    else:
        holds.append(False)
        print("\nno checkpoint committed: commit latency NOT measured")
    clean = not left and not autograph_left
    holds.append(clean)
    print(f"\ntemporary files left by the run (the tasks' and the driver's temporary directories): {left or 'none'}, "
          f"autograph files: {autograph_left}: zero leftovers: {'yes' if clean else 'NO'}")
    grown = {k: real_after[k] - real_before[k] for k in real_before if real_after[k] != real_before[k]}
    print(f"(/tmp itself, where other programs write too: {grown or 'no change'} in raytf-* and autograph entries)")
    return all(holds) and result.status == "succeeded"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="of training, before the stop is asked for")
    ap.add_argument("--checkpoint-steps", type=int, default=400)
    ap.add_argument("--steps-per-epoch", type=int, default=2000)
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--json", help="also write the samples (commits, RSS series) to this file")
    ap.add_argument("--smoke", action="store_true", help="~25 s of training, short epochs: the CI check that it runs")
    a = ap.parse_args(argv)
    if a.smoke:
        # Long enough for a few commits and RSS samples, no longer: CI's second step has a budget (issue 31).
        a.minutes, a.checkpoint_steps, a.steps_per_epoch, a.sample_s = 0.4, 100, 200, 2.0
    os.chdir(ROOT)
    import ray

    import raytf

    # Short (the tasks' temporary directories hold Unix sockets), and the run's alone: counted exactly.
    tmp = Path(tempfile.mkdtemp(prefix="rsoak-", dir="/tmp"))
    scratch = Path(tempfile.mkdtemp(prefix="soakrun-"))  # (not raytf-*: /tmp's raytf-* entries are counted)
    out = scratch / "out"
    out.mkdir()
    stop_file = out / "stop_after"
    real_before = _real_tmp()
    saved = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp)  # the Ray processes' (raylet, workers, task actors), not this one's: resolved
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    finally:
        if saved is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = saved
    # This process's own temporary files (raytf's driver side: TensorBoard files of an object store's run, say) in a
    # directory of the benchmark's too, from here on (Ray's session directory, made by ray.init, stays where it is).
    drv_tmp = Path(tempfile.mkdtemp(prefix="rsoakd-", dir="/tmp"))
    tempfile.tempdir = str(drv_tmp)
    tmp_before, drv_before = _tmp_entries(tmp), _tmp_entries(drv_tmp)
    cfg = raytf.load_config(ROOT / "conf/local.yaml", [
        f"storage.path={scratch / 'runs'}", "run.name=soak", "train.entrypoint=benchmarks.soak:train",
        "train.epochs=100000", f"train.steps_per_epoch={a.steps_per_epoch}", "train.batch_size=64",
        "checkpoint.every_epochs=0", f"checkpoint.every_steps={a.checkpoint_steps}", "checkpoint.keep_last=3",
        "metrics.every_steps=1", "cluster.standby=0", f"train.params.out={out}", f"train.params.stop_file={stop_file}"])
    w = Watch(out, a.sample_s)
    done: dict = {}

    def run():
        done["result"] = raytf.fit(cfg, quiet=True, on_event=w.on_event)

    w.start()
    thread = threading.Thread(target=run, name="soak-run")
    thread.start()
    while not w.step_at and thread.is_alive():
        time.sleep(0.5)  # polling the event callback's record for the first step
    began = time.time()
    every = max(10.0, a.minutes * 60 / 20)  # a progress line about twenty times a run
    said = began
    while thread.is_alive() and time.time() - began < a.minutes * 60:
        time.sleep(1.0)
        if time.time() - said >= every:
            said = time.time()
            print(f"{(said - began) / 60:5.1f} min, step {w.last_step}, {len(w.commits)} commits",
                  flush=True)
    tmp_name = stop_file.with_suffix(".tmp")
    tmp_name.write_text(str(w.epoch + 2))
    os.replace(tmp_name, stop_file)  # whole, for ranks reading it at an epoch's start
    thread.join()
    ended = time.time()
    w.stop()
    ray.shutdown()
    result = done["result"]
    left = sorted(set(_tmp_entries(tmp)) - set(tmp_before)) + sorted(set(_tmp_entries(drv_tmp)) - set(drv_before))
    autograph_left = _autograph(tmp) + _autograph(drv_tmp)
    real_after = _real_tmp()
    ok = report(w, began, ended, left, autograph_left, real_before, real_after, result)
    if a.json:
        Path(a.json).write_text(json.dumps({"commits": w.commits, "rss": w.rss}))
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(drv_tmp, ignore_errors=True)
    print(f"\ntargets {'hold' if ok else 'do NOT all hold'}")
    if a.smoke:  # a minute says that it runs, not whether memory settles: the run itself must succeed
        return 0 if result.status == "succeeded" else 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
