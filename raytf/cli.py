"""`raytf`: the one command, its subcommands in the convention of `ray` and `mlflow` (raytf issue 73):

  raytf launch CONFIG.yaml [key=value ...]   run a training job (python -m raytf.launch)
  raytf runs ls|show|plot ...                the runs on a storage (python -m raytf.runs)
  raytf init [DIR]                           start a project: DIR/raytf.yaml and DIR/train.py to edit
  raytf --version

`raytf CONFIG.yaml ...`, the command of 0.1 (the launcher alone), still launches, with a line saying so, until 0.3
(the deprecation policy: CHANGELOG.md)."""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from importlib import resources
from pathlib import Path

from raytf._version import DISTRIBUTION, __version__

SUBCOMMANDS = {
    "launch": "run a training job from a YAML config and key=value overrides (as python -m raytf.launch)",
    "runs": "list, show and plot the runs on a storage (as python -m raytf.runs)",
    "init": "start a project in a directory: a config (raytf.yaml) and a training function (train.py) to edit",
}
STARTER = ("raytf.yaml", "train.py")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="raytf", description="Ray-orchestrated multi-node TensorFlow training.",
        epilog="`raytf COMMAND --help` for a command's own options. A first run, from an empty directory: "
               "raytf init && raytf launch raytf.yaml")
    p.add_argument("--version", action="version", version=f"raytf {__version__} ({DISTRIBUTION})")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, text in SUBCOMMANDS.items():
        sub.add_parser(name, help=text, add_help=False)
    return p


def _init_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="raytf init", description=SUBCOMMANDS["init"] + ".")
    p.add_argument("directory", nargs="?", default=".", help="where to write them (default: here)")
    p.add_argument("--force", action="store_true", help="overwrite raytf.yaml and train.py if they are there")
    return p


def init(argv: list[str]) -> int:
    """`raytf init [DIR] [--force]`: the starter config and training function (raytf/starter/) written into DIR."""
    args = _init_parser().parse_args(argv)
    target = Path(args.directory)
    there = [name for name in STARTER if (target / name).exists()]
    if there and not args.force:
        print(f"raytf init: {', '.join(str(target / n) for n in there)} already there; give another directory, "
              "or --force to overwrite", file=sys.stderr)
        return 2
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name in STARTER:
            (target / name).write_text(resources.files("raytf.starter").joinpath(name).read_text())
    except OSError as e:
        print(f"raytf init: cannot write into {target}: {e}", file=sys.stderr)
        return 2
    where = "" if target.resolve() == Path.cwd().resolve() else f"cd {target} && "
    print(f"wrote {target / 'raytf.yaml'} and {target / 'train.py'}; train on 2 workers of an embedded Ray: "
          f"{where}raytf launch raytf.yaml")
    return 0


def _old_form(argv: list[str]) -> str | None:
    """The config of 0.1's `raytf [options] CONFIG.yaml [key=value ...]` (the command was the launcher), if `argv`
    is one: launch's own parser finds its config, a YAML file's name or a file that is there. None otherwise (a
    typo of a subcommand is the usage error that lists them)."""
    from raytf import launch

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            config = launch._parser().parse_known_intermixed_args(argv)[0].config
    except SystemExit:
        return None
    return config if config.endswith((".yaml", ".yml")) or Path(config).is_file() else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SUBCOMMANDS:
        command, rest = argv[0], argv[1:]
        if command == "launch":
            from raytf import launch

            return launch.main(rest, prog="raytf launch")
        if command == "runs":
            from raytf import runs

            return runs.main(rest, prog="raytf runs")
        return init(rest)
    if argv and not {"-h", "--help", "--version"} & set(argv) and (config := _old_form(argv)) is not None:
        # 0.1's form: still a launch, for one minor version (CHANGELOG.md's deprecation policy).
        print(f"raytf: `raytf {config} ...` is deprecated since 0.2 and goes in 0.3: use `raytf launch {config} "
              "...`", file=sys.stderr)
        from raytf import launch

        return launch.main(argv, prog="raytf launch")
    args = _parser().parse_args(argv)  # (--help, --version and a usage error exit here)
    _parser().print_help(sys.stderr)  # (no command given)
    return 2 if args.command is None else 0


if __name__ == "__main__":
    sys.exit(main())
