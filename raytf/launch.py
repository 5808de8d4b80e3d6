"""`python -m raytf.launch CONFIG.yaml [key=value ...]`: run one training job from the command line.

Exit codes: 0 success, 1 the run failed, 2 bad configuration or usage (a plan the cluster can never hold too,
from a launch as from --dry-run), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP: a closed
terminal); each of the three after a final checkpoint (checkpoint.on_interrupt).
"""

from __future__ import annotations

import argparse
import logging
import sys

from raytf._core import timeline as tl
from raytf._core.failure import CONFIG as CONFIG_FAILURE
from raytf._driver import signals, timeline
from raytf.config import load_config, validate_run
from raytf.errors import ConfigError, PlacementError, RaytfError


def _parser(prog: str = "python -m raytf.launch") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("config", help="YAML config file (e.g. conf/local.yaml)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.epochs=5 run.name=exp1")
    p.add_argument("--quiet", action="store_true", help="no progress bars, log lines only")
    p.add_argument("--all-ranks", action="store_true",
                   help="print every rank's output, not only rank 0's (train.stream_output=all)")
    p.add_argument("--tf-logs", action="store_true",
                   help="print TensorFlow's log lines too; they are in each task's log anyway "
                        "(train.show_tf_logs=true)")
    p.add_argument("--scaling", metavar="N,N,...",
                   help="run the job at each worker count (per-replica batch fixed) and report examples/s, "
                        "speedup and efficiency as a table and a plot, e.g. --scaling 1,2,4")
    p.add_argument("--dry-run", action="store_true",
                   help="reserve and start nothing: print the tasks, what each reserves and runs, the placement "
                        "against what the cluster has, the ports and the TF cluster spec's shape; exit 0, or 2 with "
                        "the line a launch would fail with")
    p.add_argument("--address", help="Ray cluster to join (auto, host:port, ray://host:port); "
                   "same as ray.address=..., which otherwise falls back to $RAY_ADDRESS")
    return p


def _print(text: str, err: bool = False) -> None:
    """The CLI's own line, to a stream that may be closed (`| head`, a closed terminal): then nothing is printed,
    and the run's exit code stays its own (never BrokenPipeError's 1)."""
    import os

    stream = sys.stderr if err else sys.stdout
    try:
        print(text, file=stream, flush=True)
    except (BrokenPipeError, OSError):
        try:  # (Python's advice for a closed pipe: point the fd at devnull, or its flush at exit fails again)
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        except (OSError, ValueError):
            pass


def main(argv: list[str] | None = None, prog: str = "python -m raytf.launch") -> int:
    """The command (its exit code); the process's own SIGTERM and SIGHUP handlers are put back after it (a test's,
    a notebook's: main may run in a process that outlives it). `prog`: how its usage names it (`raytf launch`)."""
    with signals.for_the_command():
        return _main(argv, prog)


def _main(argv: list[str] | None, prog: str) -> int:
    import time

    line = timeline.for_process()  # result.json's `timeline`: where a cold command's seconds go
    line.mark(tl.IMPORTS_DONE, time.time())
    args = _parser(prog).parse_intermixed_args(argv)
    # raytf's own lines from INFO up, other libraries' from WARNING up: a first run's matplotlib said "generated new
    # fontManager" at INFO (raytf issue 21: the terminal shows raytf's lines and real problems).
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    logging.getLogger("raytf").setLevel(logging.INFO)
    signals.install()
    try:
        overrides = list(args.overrides) + ([f"ray.address={args.address}"] if args.address else [])
        overrides += ["train.stream_output=all"] if args.all_ranks else []
        overrides += ["train.show_tf_logs=true"] if args.tf_logs else []
        cfg = validate_run(load_config(args.config, overrides))  # a run: refused before Ray starts
        one_run = not (args.scaling or cfg.sweep.space or args.dry_run)
        if not one_run:  # (one run's launch checks these with the rest: preflight.prepare below)
            if cfg.storage.credentials_file and cfg.storage.path.startswith("s3://"):
                from raytf._s3 import read_credentials

                read_credentials(cfg.storage.credentials_file)  # readable here (each node reads its own copy)
            if cfg.tracking.mlflow.uri.strip():
                from raytf._driver.tracking import check_installed

                check_installed(cfg.tracking.mlflow.uri.strip())
        if args.scaling:
            from raytf.api.scaling import parse_workers

            scaling_counts = parse_workers(args.scaling)
            if cfg.sweep.space:
                raise ConfigError("--scaling and sweep.space both given: a scaling report runs one job at each "
                                  "worker count; drop the sweep: section (or sweep.space=null) or --scaling")
        if cfg.sweep.space:  # a misspelt key would fail every trial: say so before Ray starts
            from raytf.api.sweep import check_sweep

            sw = cfg.sweep
            check_sweep(cfg, sw.space, max_concurrent=sw.max_concurrent, num_samples=sw.num_samples)
        if args.dry_run:
            return _dry_run(cfg, scaling_counts if args.scaling else None)
        launch = None
        if one_run:  # every check of it (the program, MLflow, the run directory's lineage) before Ray is loaded
            from raytf._driver import preflight

            launch = preflight.prepare(cfg, timeline=line, validated=True)  # (checked above, once)
    except ConfigError as e:
        print(f"raytf: config error: {e}", file=sys.stderr)
        return 2
    except RaytfError as e:  # (a dry run that cannot reach the configured cluster; storage that cannot be read)
        print(f"raytf: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _print("raytf: interrupted; nothing was started", err=True)
        return signals.exit_code()
    line.mark(tl.CONFIG_CHECKED, time.time())
    from raytf._driver import connect, standby
    from raytf.api.fit import _fit

    line.mark(tl.DRIVER_IMPORTED, time.time())
    started, held = False, signals.Holding()
    try:
        if launch is None:  # several runs (a sweep, a scaling report), each prepared as it starts
            with held:
                started = connect.ensure_ray(cfg)
            return _sweep(cfg) if cfg.sweep.space else _scaling(cfg, scaling_counts, quiet=args.quiet)
        try:
            with held:
                launch.connect()
        finally:
            started = launch.started_ray
        # A failed run: its line, then exit 1; this command's session is its one run (no standbys made at its end).
        result = _fit(cfg, quiet=args.quiet, raise_on_failure=False, refill_at_end=False, launch=launch)
    except ConfigError as e:
        print(f"raytf: config error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _print("raytf: interrupted; everything was released", err=True)
        return signals.exit_code()
    except PlacementError as e:  # (one the cluster can never hold is the config's: 2, as from --dry-run)
        print(f"raytf: {e}", file=sys.stderr)
        return 2 if e.never else 1
    except RaytfError as e:
        print(f"raytf: {e}", file=sys.stderr)
        return 1
    finally:
        standby.release()  # this command's standbys: nothing for another command to take
        if launch is not None:
            launch.release()
        if started or held.cut_short:
            import ray

            ray.shutdown()
    _print(f"raytf: {result.status}: {result.run_dir}")
    if result.final_metrics:
        _print("raytf: final metrics: " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                   for k, v in result.final_metrics.items()))
    if result.status == "interrupted":  # (a signal the driver's loop took: the run saved and ended)
        return signals.exit_code()
    if result.error is not None:
        _print(f"raytf: {result.error}", err=True)
        # A run failed by its configuration (the program, the cluster: a failure of kind config, never retried)
        # exits as bad input does, 2; any other failure 1.
        root = getattr(result.error, "root", None)
        return 2 if root is not None and root.kind == CONFIG_FAILURE else 1
    return 0


def _dry_run(cfg, scaling_counts: list[int] | None) -> int:
    """--dry-run: the plan of each run the command would make (one, one per --scaling count; a sweep's trials
    are each a run like the base one); 2 with the first one's problem when one could not be placed."""
    import copy

    from raytf.api.plan import plan

    configs = [cfg]
    if scaling_counts:
        configs = []
        for n in scaling_counts:
            c = copy.deepcopy(cfg)
            c.cluster.num_workers = n
            configs.append(c)
    previews = [plan(c) for c in configs]
    for p in previews:
        print(p.text(verdict=p.ok))
    if cfg.sweep.space:
        from raytf.api.sweep import trial_count

        trials = trial_count(cfg.sweep.space, cfg.sweep.num_samples)
        print(f"sweep: {trials if trials is not None else 'sampled'} trial(s), up to {cfg.sweep.max_concurrent} at "
              "once, each a run like this one (the values in sweep.space change per trial)")
    failed = next((p for p in previews if not p.ok), None)
    if failed is not None:
        print(f"raytf: {failed.problem}", file=sys.stderr)
        return 2
    return 0


def _sweep(cfg) -> int:
    """A config with a `sweep:` section: one raytf run per point; prints the table; 1 if any trial failed."""
    import pandas as pd

    from raytf.api.sweep import sweep

    sw = cfg.sweep
    scheduler = None
    if sw.scheduler == "asha":
        from ray.tune.schedulers import ASHAScheduler

        scheduler = ASHAScheduler(max_t=cfg.train.epochs, time_attr="epoch")
    table = sweep(cfg, space=sw.space, max_concurrent=sw.max_concurrent, num_samples=sw.num_samples, metric=sw.metric,
                  mode=sw.mode, scheduler=scheduler, name=sw.name)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.drop(columns=[c for c in table.columns if c.startswith("best_")]).to_string(index=False))
    return 0 if (table["status"] != "failed").all() else 1


def _scaling(cfg, counts: list[int], quiet: bool) -> int:
    """--scaling: one run per worker count; prints the table; 1 if any count failed or could not be placed."""
    import pandas as pd

    from raytf.api.scaling import measure

    table = measure(cfg, counts, quiet=quiet, refill_at_end=False)  # this command's session is its one run
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3g}".format):
        print(table.to_string(index=False))
    print(f"raytf: scaling plot: {table.attrs['plot']}")
    return 0 if (table["status"] == "succeeded").all() else 1


if __name__ == "__main__":
    sys.exit(main())
