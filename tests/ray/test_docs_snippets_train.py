"""The documentation's blocks that train (marked `<!-- snippet: slow -->`; tests/core/test_docs_snippets.py checks the
others and lists these), run as written, on the session's Ray, shortened: every launch and every config a Python
block loads gets `_short`'s settings last (an epoch or the block's own count, two steps each, storage in the test's
directory), and a sweep's grid cut to two trials (`two_trials`), so a block that works at full length works here, and
a key or command the docs misspell fails. A `pip install` of a block is the test environment's already. A launch
command that another test trains as written (tests/documented.py) is counted, not trained a second time."""

import inspect
import json
import os
import shlex
import subprocess
import sys

import pytest

from tests import documented
from tests.conftest import ROOT, state_address
from tests.core.test_docs_snippets import commands, slow_snippets

pytestmark = [pytest.mark.timeout(900)]

_ran: set[tuple[str, ...]] = set()  # launch commands run already (a block repeated on another page runs once)


def _short(storage) -> list[str]:
    return [f"storage.path={storage}", "train.steps_per_epoch=2", "train.params.validation_steps=1",
            "metrics.every_steps=1", "cluster.standby=0"]


def two_trials(space: dict) -> dict:
    """A sweep's grid shortened as its epochs are: its first two points (the first key with several values keeps two,
    every other key its first). The sweep's path is the same for two trials as for four: queued, each a full run,
    the table. Each of docs/notebooks.md's two sweeps took 17 s less so (alone, 2026-11-28)."""
    out, widened = {}, False
    for key, values in space.items():
        several = isinstance(values, (list, tuple)) and len(values) > 1
        out[key] = list(values[:1 + (not widened)]) if several else values
        widened = widened or several
    return out


def _sweep_override(argv: list[str]) -> list[str]:
    """A launch of a config with a sweep section: its space, cut to two trials, given last on the command line."""
    from raytf.config import load_config

    space = load_config(ROOT / argv[3]).sweep.space
    return [f"sweep.space={json.dumps(two_trials(dict(space)))}"] if space else []


# A Python block runs in a process of its own with this first: its configs get the short settings last (raytf.fit,
# raytf.sweep and raytf.load_config: each module's name for raytf.config.load_config), its sweeps two trials, its
# ray.init() joins the session's Ray (RAY_ADDRESS), and its plots are drawn off screen.
_PRELUDE = """
import matplotlib
matplotlib.use("Agg")
import raytf.config.load as _load
_original = _load.load_config
def _shortened(config, overrides=None, **kwargs):
    extra = {SHORT!r}
    if isinstance(overrides, dict):
        overrides = {{**overrides, **dict(o.split("=", 1) for o in extra)}}
    else:
        overrides = [*(overrides or []), *extra]
    return _original(config, overrides, **kwargs)
_load.load_config = _shortened
import raytf, raytf.config, raytf.api.fit, raytf.api.plan, raytf.api.scaling, raytf.api.sweep
for _module in (raytf, raytf.config, raytf.api.fit, raytf.api.plan, raytf.api.scaling, raytf.api.sweep):
    _module.load_config = _shortened
{TWO_TRIALS}
_sweep = raytf.api.sweep.sweep
def _short_sweep(*args, space, **kwargs):
    return _sweep(*args, space=two_trials(dict(space)), **kwargs)
raytf.sweep = raytf.api.sweep.sweep = _short_sweep
"""


# A script's own length, as its arguments give it: shortened as a training function's epochs and steps are.
_SCRIPT_SHORT = {"--epochs": "1", "--steps-per-epoch": "2"}


def _script_args(argv: list[str]) -> list[str]:
    """A launch of a script whose arguments set its epochs or steps: those arguments shortened (`_SCRIPT_SHORT`), the
    others as written, given last on the command line. (docs/scripts.md's conf/script.yaml trained its 3 epochs of 20
    steps here: the block's longest launch.)"""
    from raytf.config import load_config

    train = load_config(ROOT / argv[3], argv[4:]).train
    args = [str(a) for a in train.args]
    if not (train.script or train.module) or not set(args) & set(_SCRIPT_SHORT):
        return []
    short = [_SCRIPT_SHORT[args[i - 1]] if i and args[i - 1] in _SCRIPT_SHORT else a for i, a in enumerate(args)]
    return [f"train.args={json.dumps(short)}"]


def _epochs(argv: list[str]) -> list[str]:
    """One epoch, unless the command says how many itself (docs/runs.md's relaunch counts on from its first run)."""
    return [] if any(a.startswith("train.epochs=") for a in argv) else ["train.epochs=1"]


@pytest.mark.slow
@pytest.mark.parametrize("snippet", slow_snippets(), ids=lambda s: f"{s[0]}:{s[1]}")
def test_a_documented_block_that_trains_works(snippet, ray_local, no_leaks, tmp_path):
    file, line, language, code = snippet
    env = {**os.environ, "RAY_ADDRESS": state_address()}
    ran = 0
    if language == "python":
        prelude = _PRELUDE.format(SHORT=[*_short(tmp_path / "runs"), "train.epochs=1"],
                                  TWO_TRIALS=inspect.getsource(two_trials))
        proc = subprocess.run([sys.executable, "-c", prelude + code], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, f"{file}:{line}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        ran += 1
    else:
        for argv in commands(code):
            if argv[:3] == ["pip", "install", "-e"]:
                continue  # (the test environment has the package and its extras installed)
            assert argv[:3] == ["python", "-m", "raytf.launch"], f"{file}:{line}: not a raytf command: {argv}"
            if shlex.join(argv) in documented.TRAINED_BY:  # (that test trains it as written: tests/documented.py)
                ran += 1
                continue
            if tuple(argv) in _ran:
                ran += 1
                continue
            _ran.add(tuple(argv))
            cmd = [sys.executable, *argv[1:], *_epochs(argv), *_short(tmp_path / "runs"), *_sweep_override(argv),
                   *_script_args(argv), "--address", state_address()]
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, f"{file}:{line}: {shlex.join(argv)}\n{proc.stderr[-4000:]}"
            ran += 1
    assert ran, f"{file}:{line}: nothing run"
    results = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("result.json")]
    assert all(r["status"] == "succeeded" for r in results), [r.get("error") for r in results]
