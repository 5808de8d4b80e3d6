"""raytf's step time on a shaped network against the same run on the unshaped one, across hosts of the test bed.

Run (as root, on Linux):  python -m benchmarks.network [--delay-ms 2] [--rate 1gbit] [--rounds 3]
                          python -m benchmarks.network --delay-ms 0 --rate 100mbit   (rate only: tc tbf)

Three hosts (tests/hosts.py: network namespaces on one bridge in 198.18.0.0/24, a Ray node each): the head runs
the driver, the two others one MultiWorkerMirroredStrategy worker each, so every all-reduce crosses the links.
Each round runs `python -m raytf.launch conf/two_node.yaml` with benchmarks/workload.py's program twice, on the
bare links and with every host's link shaped (tc netem: delay each way and a rate; tbf when --delay-ms is 0),
in alternating order; the table shows medians over rounds and the median of per-round ratios.

What it cannot show: real NICs, their offloads and switches, NCCL, GPUs. All hosts share this machine's CPUs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.run import ROOT, Trial, _fmt, _measure
from tests import hosts

_TIMEOUT_S = 900


def _run(bed: hosts.HostBed, scratch: Path, name: str, a: argparse.Namespace) -> Trial:
    out = scratch / name
    out.mkdir(parents=True)
    argv = [sys.executable, "-m", "raytf.launch", "conf/two_node.yaml", "--quiet", f"ray.address={bed.address}",
            f"storage.path={scratch / 'runs'}", f"run.name={name}", "cluster.worker.gpus=0",
            "train.entrypoint=benchmarks.workload:train", f"train.params.out={out}", f"train.epochs={a.epochs}",
            f"train.steps_per_epoch={a.steps}", f"train.batch_size={a.batch}", "checkpoint.every_epochs=0",
            "checkpoint.export_model=false", "metrics.every_steps=0"]
    t0 = time.time()
    done = bed.exec(bed.head, argv, cwd=ROOT, capture_output=True, text=True, timeout=_TIMEOUT_S)
    wall = time.time() - t0
    if done.returncode:
        return Trial(name, wall, error=f"exit {done.returncode}: {(done.stderr or done.stdout)[-300:]}")
    return _measure(name, t0, wall, out, a.batch * 2)


def _shape(bed: hosts.HostBed, a: argparse.Namespace) -> None:
    for h in bed.hosts:
        bed.slow_link(h, delay_ms=a.delay_ms, rate=a.rate)


def _unshape(bed: hosts.HostBed) -> None:
    for h in bed.hosts:
        bed.unshape(h)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.network", description=__doc__.splitlines()[0])
    ap.add_argument("--delay-ms", type=float, default=2.0, help="each way, on every host's link (0: rate only)")
    ap.add_argument("--rate", default="1gbit", help="tc rate, e.g. 1gbit, 100mbit")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=50, help="per epoch")
    ap.add_argument("--batch", type=int, default=64, help="per replica")
    ap.add_argument("--json", help="also write every trial here")
    a = ap.parse_args(argv)
    why = hosts.unavailable()
    if why:
        print(f"benchmarks.network: no host bed on this machine: {why}", file=sys.stderr)
        return 2
    shaped_name = f"{a.delay_ms:g} ms + {a.rate}" if a.delay_ms else f"{a.rate} (tbf)"
    trials: dict[str, list[Trial]] = {"unshaped": [], shaped_name: []}
    bed = hosts.HostBed([0, 2, 2])
    with tempfile.TemporaryDirectory(prefix="raytf-bench-net-", dir="/var/tmp") as tmp:
        scratch = Path(tmp)
        try:
            bed.start()
            try:  # refuse early, before any round, if this kernel cannot shape as asked
                _shape(bed, a)
            except hosts.NetemUnavailable as e:
                print(f"benchmarks.network: --delay-ms {a.delay_ms:g} needs tc netem, which this kernel lacks "
                      f"({e}); rerun with --delay-ms 0 to shape the rate alone (tc tbf)", file=sys.stderr)
                return 2
            _unshape(bed)
            for r in range(a.rounds):
                order = ["unshaped", shaped_name] if r % 2 == 0 else [shaped_name, "unshaped"]
                for which in order:
                    if which != "unshaped":
                        _shape(bed, a)
                    try:
                        t = _run(bed, scratch, f"r{r}-{'bare' if which == 'unshaped' else 'shaped'}", a)
                    finally:
                        _unshape(bed)
                    trials[which].append(t)
                    print(f"round {r + 1}: {which}: " + (t.error or f"step {t.step_ms:.2f} ms, steady "
                                                         f"{_fmt(t.steady_ms, '.2f')} ms"), file=sys.stderr)
        finally:
            bed.close()
    print(table(trials, a))
    if a.json:
        Path(a.json).write_text(json.dumps({k: [t.__dict__ for t in v] for k, v in trials.items()}, indent=1))
    return 1 if any(t.error for v in trials.values() for t in v) else 0


def table(trials: dict[str, list[Trial]], a: argparse.Namespace) -> str:
    base = trials["unshaped"]
    lines = [f"2 workers on 2 hosts (+ the head), per-replica batch {a.batch}, {a.epochs} epochs x {a.steps} steps, "
             f"{a.rounds} alternating rounds", "",
             "| network | step ms (median) | step ms (steady mean) | examples/s | first step s | step ÷ unshaped "
             "| runs ok |", "|---|---|---|---|---|---|---|"]
    for name, ts in trials.items():
        ok = [t for t in ts if not t.error]

        def med(key: str, ok=ok):
            values = [getattr(t, key) for t in ok if getattr(t, key) is not None]
            return statistics.median(values) if values else None

        ratios = [t.step_ms / b.step_ms for t, b in zip(ts, base) if not t.error and not b.error]
        lines.append(f"| {name} | {_fmt(med('step_ms'), '.2f')} | {_fmt(med('steady_ms'), '.2f')} | "
                     f"{_fmt(med('examples_per_s'), '.0f')} | {_fmt(med('first_step_s'))} | "
                     f"{_fmt(statistics.median(ratios) if ratios else None, '.3f')} | {len(ok)}/{len(ts)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
