"""One launch of a run, checked before Ray starts or is joined: the config's rules, the program (its entrypoint or
script found), MLflow installed, storage's credentials readable, the run directory's lineage rule (a second lineage
refused), the plan; each once. Then Ray, once (`Launch.connect`), and whether it is an embedded one. The CLI,
`raytf.fit` and a sweep's trials all launch through `prepare`; `--dry-run` and `raytf.plan` use its checks of the
program. No Ray at import: a CLI's bad input is refused without loading it (~1 s).

Imports Ray only in `connect` (and `started_here`), never TensorFlow.
"""

from __future__ import annotations

import copy
import datetime as _dt
import importlib.util
import os
import secrets
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raytf import _storage as storage
from raytf._core import elastic
from raytf._core import timeline as tl
from raytf._core.checkpoints import CheckpointEntry
from raytf._core.function import Functions, configured, unrunnable
from raytf._core.plan import Plan, make_plan
from raytf._driver import timeline as launch_timeline
from raytf._driver import tracking
from raytf._driver.resume import Resume
from raytf.config import Config, is_function_label, validate, validate_run
from raytf.errors import ConfigError


def default_run_name(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now()
    return f"run-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def resolve_address(cfg: Config, environ: Mapping[str, str] = os.environ) -> str | None:
    """The Ray cluster to use: ray.address (the CLI's --address lands there), else RAY_ADDRESS, else None
    for an embedded local Ray; "local" too, Ray's own word for a new Ray on this machine (ray.init(address="local"),
    which a Ray Train program's RAY_ADDRESS=local asks for: nothing to ship, the launch directory is local)."""
    address = cfg.ray.address or environ.get("RAY_ADDRESS") or None
    return None if address == "local" else address


def python_path(cfg: Config) -> list[str]:
    """sys.path entries for the driver's own imports of the user's code (train.datasets' function): train.python_path
    from the launch directory, plus the launch directory on an embedded Ray. (The tasks' are usercode.plan's.)"""
    paths = [os.path.abspath(p) for p in cfg.train.python_path]
    if resolve_address(cfg) is None:
        # Embedded Ray runs on this machine: let tasks import what the driver's cwd can.
        paths.append(os.getcwd())
    return paths


def check_entrypoint(cfg: Config, paths: list[str], functions: Functions | None = None) -> None:
    """Fail before anything starts when the config records a function sent by value that this run was not given
    (raytf._core.function); on an embedded Ray, also when the entrypoint's (or train.module's) module cannot be
    found (without importing it: that would pull TensorFlow into the driver) or train.script is not there. Joining
    a cluster the nodes may have what the driver lacks (an image): each task checks for itself (usercode.plan)."""
    functions = functions or Functions()
    for key, value, given in (("train.entrypoint", cfg.train.entrypoint, functions.train),
                              ("train.eval_entrypoint", cfg.train.eval_entrypoint, functions.evaluate)):
        if is_function_label(value) and given is None:
            raise unrunnable(key, value)
    if resolve_address(cfg) is not None:
        return
    if cfg.train.script:
        if not os.path.isfile(cfg.train.script):
            raise ConfigError(f"train.script ({cfg.train.script!r}): no such file (relative to {os.getcwd()}). Fix: "
                              "give its path from the directory you launch in, or an absolute path")
        return
    if functions.train is not None and is_function_label(cfg.train.entrypoint):
        return  # sent by value: nothing to import by name
    key = "train.module" if cfg.train.module else "train.entrypoint"
    module = cfg.train.module or cfg.train.entrypoint.partition(":")[0]
    saved = list(sys.path)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path[:] = saved
    if not found:
        raise ConfigError(f"{key} ({cfg.train.module or cfg.train.entrypoint!r}): module {module!r} not found on the "
                          f"driver (searched sys.path and {paths}). Fix: run from the directory that holds it, or add "
                          "it with train.python_path=[...]")


@dataclass
class Launch:
    """A launch checked and its run directory read (`prepare`), before Ray. `previous`: earlier launches'
    result.json ({} for none); `table`: their metrics (with checkpoint.resume); `resumed_from`: the verified
    checkpoint the first attempt resumes from."""

    cfg: Config
    functions: Functions
    run_dir: storage.RunDir
    plan: Plan
    python_path: list[str]
    resume: Resume
    previous: dict[str, Any]
    table: Any
    resumed_from: CheckpointEntry | None
    tracking: Any  # _driver.tracking.MlflowRun or NoTracking
    timeline: tl.Timeline
    t0: float = field(default_factory=time.time)
    claim: storage.Claim | None = None  # this launch's claim on the run directory, until `release`
    embedded: bool | None = None  # known once connected: an embedded Ray this process started (one machine)
    started_ray: bool = False  # this launch started that Ray (the CLI stops it again)
    _plans: dict[int, Plan] = field(default_factory=dict)  # by worker count (elastic training's sizes)

    def release(self) -> None:
        """The launch is over (its run ended, or it never started): its claim on the run directory goes."""
        if self.claim is not None:
            self.claim.release()
            self.claim = None

    def plan_for(self, size: int) -> Plan:
        """The plan of the run at `size` workers (elastic training's sizes: each made once per launch)."""
        if size == self.cfg.cluster.num_workers:
            return self.plan
        if size not in self._plans:
            self._plans[size] = make_plan(elastic.sized(self.cfg, size))
        return self._plans[size]

    def connect(self) -> bool:
        """Ray as configured, started or joined once (a second call is a no-op); whether it is an embedded Ray:
        one this process started (here or in a notebook's own `ray.init()`), one machine with no autoscaler."""
        if self.embedded is None:
            from raytf._driver import connect

            self.started_ray = connect.ensure_ray(self.cfg)
            self.timeline.mark(tl.RAY_READY, time.time())
            # Only a Ray this process started is known to be one machine with no autoscaler (a notebook's
            # ray.init(address=<cluster>) before raytf.fit, with no ray.address in the config, is a cluster).
            self.embedded = self.started_ray or connect.started_here()
        return self.embedded


def prepare(cfg: Config, functions: Functions | None = None, *, timeline: tl.Timeline | None = None,
            validated: bool = False) -> Launch:
    """The launch of `cfg` (not changed: a copy is checked), refused with a ConfigError (or a StorageError) before
    anything starts: the config's rules, the program, MLflow, storage's credentials, the run directory's lineage.
    `timeline`: the launch's (the CLI's, with its marks since its process started); a new one otherwise.
    `validated`: `cfg` came from load_config and validate_run (the CLI's): its rules are not checked again, unless
    `functions` change it."""
    functions = functions or Functions()
    cfg = configured(copy.deepcopy(cfg), functions)  # train.entrypoint records them
    if functions or not validated:
        validate_run(validate(cfg))  # before anything starts: storage keys would travel to every task
    cfg.run.name = cfg.run.name or default_run_name()
    if cfg.storage.credentials_file and cfg.storage.path.startswith("s3://"):
        from raytf._s3 import read_credentials

        read_credentials(cfg.storage.credentials_file)  # readable here (each node reads its own copy)
    paths = python_path(cfg)
    check_entrypoint(cfg, paths, functions)
    tracker = tracking.for_run(cfg)  # (MLflow missing: a ConfigError now)
    run_dir = storage.RunDir(cfg.storage, cfg.run.name)
    # One writer per run directory: a second launch of a running run.name is refused here, before it reads or
    # changes anything there (raytf issue 71: two launches trained into one, and one's metrics were lost); a killed
    # launch's claim is taken over. Released by Launch.release (the driver's end, the CLI's).
    claim = storage.Claim(run_dir)
    claim.take()
    try:
        resume = Resume(cfg, run_dir)
        previous, table, resumed_from = resume.earlier()  # (a second lineage refused: a ConfigError)
        return Launch(cfg=cfg, functions=functions, run_dir=run_dir, plan=make_plan(cfg), python_path=paths,
                      resume=resume, previous=previous, table=table, resumed_from=resumed_from, tracking=tracker,
                      timeline=timeline or launch_timeline.for_process(), claim=claim)
    except BaseException:
        claim.release()
        raise
