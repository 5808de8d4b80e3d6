"""`python -m tools.docs_pictures RUN_DIR [--ranks-from RUN_DIR] [--out docs/img]`: the documentation's pictures,
drawn from a finished run by raytf's own plotting (`raytf.plot`, what `python -m raytf.runs plot` draws):

- `learning_curves.png`: the run's learning curves (README.md and docs/runs.md show it);
- `ranks.png`: each rank's step time over time, and below, its own time and input wait (docs/performance.md),
  from `--ranks-from` when given (a run with a straggler shows more), else from RUN_DIR.

A run of `conf/local.yaml` (say `python -m raytf.launch conf/local.yaml run.name=local train.epochs=5`) is what
the pages describe: the figures' titles are the runs' names. Imports neither Ray nor TensorFlow: the figures are
matplotlib's, from the run directory's metrics.parquet.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from raytf.errors import RaytfError

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"
PICTURES = ("learning_curves.png", "ranks.png")


def draw(run_dir: str, out: Path = OUT, ranks_from: str | None = None) -> list[Path]:
    """Both pictures into `out`; the paths written. ValueError (raytf.plot's) when the ranks' run has no step-time
    breakdown."""
    import raytf

    out.mkdir(parents=True, exist_ok=True)
    curves, ranks = (out / name for name in PICTURES)
    raytf.plot(run_dir, str(curves))
    raytf.plot(ranks_from or run_dir, str(ranks), ranks=True)
    return [curves, ranks]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.docs_pictures", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", help="a finished run's directory (or URI)")
    ap.add_argument("--ranks-from", help="another run for ranks.png (e.g. one whose rank 1 reads slowly)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where the PNGs go (default {OUT})")
    args = ap.parse_args(argv)
    try:
        written = draw(args.run_dir, args.out, args.ranks_from)
    except (RaytfError, OSError, ValueError) as e:
        print(f"tools.docs_pictures: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
