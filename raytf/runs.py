"""`python -m raytf.runs ls|show|plot`: look at finished (and running) runs on any storage.

  python -m raytf.runs ls [--storage S]      one line per run: status, strategy, epochs, final metrics
  python -m raytf.runs show RUN [--storage S] the run's summary: tasks, attempts, checkpoints, final metrics, and
                                             where each rank's step time went (median ms per step of input wait,
                                             collective, save, compute), the slowest rank and the stragglers
  python -m raytf.runs plot RUN [-o FILE]    learning curves as PNG (default: RUN's learning_curves.png here)
                                             (every subcommand takes the storage as --storage, ./runs by default)
  python -m raytf.runs plot RUN --ranks      each rank's step time over time instead (default: RUN_ranks.png)

Exit codes: 0 done, 1 a run could not be read, 2 bad usage (no run where RUN points).
"""

from __future__ import annotations

import argparse
import json
import logging
import posixpath
import sys

import pyarrow as pa

from raytf import _storage as storage
from raytf._core.attempt_record import RUNNING
from raytf._core.dataservice import input_line
from raytf._storage.claim import LOST, launch_alive
from raytf.errors import RaytfError, StorageError

log = logging.getLogger("raytf")


def _run_path(run: str, storage_path: str) -> str:
    """A run name under `storage_path`, or `run` itself when it is a path or URI; S3 options in the storage's
    query (?endpoint_override=...&scheme=http) stay with it."""
    if "/" in run or "://" in run:
        return run
    base, _, query = storage_path.partition("?")
    return posixpath.join(base, run) + (f"?{query}" if query else "")


def _not_a_run(run_path: str) -> str | None:
    """None when run_path holds a run (its result.json); else one line naming the directory looked at and
    how to find the runs there."""
    rd = storage.RunDir.at(run_path)
    if rd.is_file(storage.RESULT_FILE):
        return None
    query = run_path.partition("?")[2]
    parent = posixpath.dirname(rd.uri) + (f"?{query}" if query else "")
    what = "no such directory" if not rd.exists("") else f"no {storage.RESULT_FILE} in it"
    return (f"no run at {rd.uri} ({what}): list the runs there with `python -m raytf.runs ls {parent}` (a run "
            "name is looked up under --storage, default ./runs)")


_STANDS_OUT = 1.1  # `show` names the slowest rank when its own time a step is this far above the others'


def _or_dash(value, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def _fmt_metrics(metrics: dict) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(metrics.items()))


def _summary(rd: storage.RunDir, run: str = "") -> dict:
    """The result.json of `rd` (or of its subdirectory `run`); ValueError naming the file when it is not a JSON
    object (cut short, or not raytf's)."""
    rel = posixpath.join(run, storage.RESULT_FILE)
    data = rd.read_bytes(rel)
    try:
        summary = json.loads(data.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError both
        summary, why = None, f"{type(e).__name__}: {e}"
    else:
        why = f"a JSON {type(summary).__name__}"
    if not isinstance(summary, dict):
        raise ValueError(f"{rd.uri_of(rel)} is not a run summary ({why}): it was cut short or not written by raytf; "
                         "point RUN at another run")
    if summary.get("status") == RUNNING:  # a run whose launch is gone (a killed driver) says so, not running for ever
        run_dir = storage.RunDir(rd.options, posixpath.join(rd.run_name, run)) if run else rd
        if not launch_alive(run_dir):
            summary["status"] = LOST
    return summary


def _ms(seconds) -> str:
    """Seconds per step as milliseconds (a step takes tens to hundreds of them); "-" for a part not measured."""
    return "-" if not isinstance(seconds, (int, float)) or seconds != seconds else f"{1000 * seconds:.1f}"


def _pct(value, scale: float = 1.0) -> str:
    return "-" if not isinstance(value, (int, float)) or value != value else f"{scale * value:.1f}"


def _straggler(g: dict) -> str:
    """One of result.json's `stragglers` as a line of `show`."""
    ratio = g.get("ratio")
    ratio = f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else "-"
    return (f"  {_or_dash(g.get('role'))} {_or_dash(g.get('rank'))} on {_or_dash(g.get('host'))}: "
            f"{_or_dash(g.get('part'))} {ratio} the others' ({_ms(g.get('value_s'))} vs {_ms(g.get('others_s'))} "
            f"ms/step), steps {_or_dash(g.get('step'))}-{_or_dash(g.get('last_step'))} "
            f"of attempt {_or_dash(g.get('attempt'))}"
            + (f", slow {g['episodes']} times" if isinstance(g.get("episodes"), int) and g["episodes"] > 1 else ""))


def _breakdown_lines(summary: dict, metrics: pa.Table) -> list[str]:
    """`show`'s last lines: each rank's median step time and its parts, the slowest rank, the stragglers."""
    from raytf._driver import ranks

    metrics = metrics.to_pandas()  # once: each of ranks' functions would convert an Arrow table again
    why = ranks.no_breakdown(metrics)
    if why:
        return [f"breakdown  none: {why}"]
    table = ranks.rank_breakdown(metrics, summary=summary)
    gpu = ranks.GPU_UTIL in table and table[ranks.GPU_UTIL].notna().any()
    rows = table.to_dict("records")
    hosts = [r["host"] if isinstance(r["host"], str) and r["host"] else "-" for r in rows]
    width = max([4, *map(len, hosts)])
    lines = [f"breakdown  attempt {rows[0]['attempt']}, per rank: medians, ms per step",
             f"  {'role':9} {'rank':>4}  {'host':{width}} {'steps':>7} {'step':>8} {'input':>8} {'collective':>11} "
             f"{'save':>8} {'compute':>8} {'input %':>8}" + (f" {'gpu %':>6}" if gpu else "")]
    for host, r in zip(hosts, rows):
        lines.append(f"  {r['role']:9} {r['rank']:>4}  {host:{width}} {r['steps']:>7} {_ms(r['step_time_s']):>8} "
                     f"{_ms(r['input_wait_s']):>8} {_ms(r['collective_s']):>11} {_ms(r['save_s']):>8} "
                     f"{_ms(r['compute_s']):>8} {_pct(r['input_share'], 100):>8}"
                     + (f" {_pct(r[ranks.GPU_UTIL]):>6}" if gpu else ""))
    slow = ranks.slowest_rank(table)
    own = ranks.own_time(table).dropna() if "step_time_s" in table else None
    close = own is not None and len(own) > 1 and own.max() <= _STANDS_OUT * own.drop(own.idxmax()).median()
    if slow is not None and close:
        lines.append(f"slowest: none stands out (each rank's own time a step, its all-reduce wait left out, is "
                     f"{_ms(own.min())}-{_ms(own.max())} ms: within {round(100 * (_STANDS_OUT - 1))} % of the others')")
    elif slow is not None:
        waits = slow.get("collective_s")
        own = "" if waits is None or waits != waits else f", {_ms(slow['step_time_s'] - waits)} of its own"
        lines.append(f"slowest: {slow['role']} {slow['rank']} ({_ms(slow['step_time_s'])} ms/step{own}: the rank the "
                     "others wait for)")
    else:
        timed = table["step_time_s"].notna().any()
        lines.append("slowest: none (every rank's median step time is the same)" if timed else "slowest: -")
    stragglers = summary.get("stragglers")
    if stragglers is None:  # a run from before they were recorded
        lines.append("stragglers: -")
    elif not stragglers:
        lines.append("stragglers: none")
    else:
        lines += ["stragglers:", *(_straggler(g) for g in stragglers if isinstance(g, dict))]
    return lines


def ls(storage_path: str) -> list[dict]:
    root = storage.RunDir.at(storage_path)  # (the storage path, read as a directory of runs)
    if root.is_file():
        raise NotADirectoryError(f"{storage_path} is a file, not a directory of runs: pass the directory the runs "
                                 "are in (storage.path), e.g. ./runs")
    rows = []
    for name in root.subdirs():
        try:
            rows.append(_summary(root, name))
        except (OSError, ValueError):
            continue  # not a run directory
        except StorageError as e:  # storage that failed every try: that run is not listed, and the line says so
            log.warning("%s not listed: %s", root.uri_of(name), e)
    return rows


def _parser(prog: str = "python -m raytf.runs") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Inspect raytf runs.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_ls = sub.add_parser("ls", help="list the runs under a storage path")
    # The storage as every subcommand takes it (--storage); a path given alone, as before, is taken the same.
    p_ls.add_argument("path", nargs="?", help=argparse.SUPPRESS)
    p_ls.add_argument("--storage", default=None, help="where the runs are (storage.path; default ./runs)")
    p_show = sub.add_parser("show", help="one run's summary")
    p_show.add_argument("run", help="run name (under --storage) or run directory path/URI")
    p_show.add_argument("--storage", default="./runs", help="where the runs are (storage.path; default ./runs)")
    p_plot = sub.add_parser("plot", help="a run's learning curves (or its step time per rank) as PNG")
    p_plot.add_argument("run", help="run name (under --storage) or run directory path/URI")
    p_plot.add_argument("--storage", default="./runs", help="where the runs are (storage.path; default ./runs)")
    p_plot.add_argument("-o", "--out", help="PNG file to write (default: <run name>_learning_curves.png, or "
                        "<run name>_ranks.png with --ranks)")
    p_plot.add_argument("--ranks", action="store_true", help="each rank's step time over time instead of the "
                        "learning curves")
    return ap


def main(argv: list[str] | None = None, prog: str = "python -m raytf.runs") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        if args.cmd == "ls":
            if args.path and args.storage and args.path != args.storage:
                print(f"raytf.runs: ls {args.path} --storage {args.storage}: two storage paths; give one "
                      "(--storage)", file=sys.stderr)
                return 2
            args.storage = args.storage or args.path or "./runs"
            try:
                rows = ls(args.storage)
            except NotADirectoryError as e:
                print(f"raytf.runs: {e}", file=sys.stderr)
                return 2
            if not rows:
                print(f"no runs under {args.storage}")
            for r in rows:
                fm = r.get("final_metrics") or {}
                print(f"{r.get('run', '?'):32} {r.get('status', '?'):11} {r.get('strategy', '?'):22} "
                      f"attempts={len(r.get('attempts') or [])} {_fmt_metrics(fm)}")
            return 0
        from raytf.api.result import load_result

        run_path = _run_path(args.run, args.storage)
        missing = _not_a_run(run_path)
        if missing:
            print(f"raytf.runs: {missing}", file=sys.stderr)
            return 2
        # (a damaged result.json: named, the file, not only the decoder's complaint; a lost launch: said)
        status = _summary(storage.RunDir.at(run_path)).get("status")
        result = load_result(run_path)
        if args.cmd == "show":
            s = {**result.summary, "status": status}
            print(f"run        {s.get('run')}   ({result.run_dir})")
            print(f"status     {_or_dash(s.get('status'))}   strategy {_or_dash(s.get('strategy'))}   "
                  f"roles {_or_dash(s.get('roles'))}")
            print(f"final      {_fmt_metrics(s.get('final_metrics') or {})}")
            print(f"checkpoint {_or_dash(s.get('last_checkpoint'))}   resumed_from {_or_dash(s.get('resumed_from'))}")
            print(f"timings    duration {_or_dash(s.get('duration_s'), 's')}   "
                  f"first step {_or_dash(s.get('first_step_s'), 's')}")
            for t in s.get("tasks") or []:
                print(f"  task {t['role']:9} rank {t['rank']:<3} node {str(t['node_id'])[:12]}  {t['address']}")
            if (served := input_line(s.get("data_service"))) is not None:
                print(served)
            for a in s.get("attempts") or []:
                print(f"  attempt {a['attempt']}: {a['status']:11} "
                      + " ".join(f"{k}={_or_dash(a.get(k))}" for k in ("cause", "rank", "decision", "recovery_s",
                                                                      "steps_lost")))
            if s.get("mlflow_run_id"):  # tracking.mlflow
                print(f"mlflow     run {s['mlflow_run_id']}")
            if s.get("error"):
                print(f"error      {s['error'].get('message')}")
            for line in _breakdown_lines(s, result.metrics_table):
                print(line)
            return 0
        from raytf.api.plots import plot

        suffix = "ranks" if args.ranks else "learning_curves"
        out = args.out or f"{result.summary.get('run', 'run')}_{suffix}.png"
        plot(result, out=out, ranks=args.ranks)
        print(out)
        return 0
    except (RaytfError, OSError, ValueError) as e:
        print(f"raytf.runs: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
