"""`raytf.plan(cfg)` and `python -m raytf.launch CONFIG --dry-run`: what a launch would reserve and start,
checked against the cluster it would run on, with nothing reserved and nothing started (an embedded Ray is not
started either: this machine is described instead). Runs in the user's process: Ray (imported lazily), never
TensorFlow."""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from raytf._core.preview import Cluster, Preview, preview
from raytf.config import Config, load_config, validate, validate_run


def plan(config: Config | str | Path | dict, overrides: Sequence[str] | Mapping[str, Any] | None = None, *,
         train_fn: Any = None, eval_fn: Any = None) -> Preview:
    """What launching `config` would reserve and start (`Preview.text()`, `Preview.rows()`), and `problem`: the
    line a launch would fail with ("" when it could be placed). Its first arguments are `raytf.fit`'s: a notebook's
    `fit(cfg, train_fn=train)` is planned with `plan(cfg, train_fn=train)` (the function is only recorded, not
    sent anywhere). Bad configuration raises ConfigError, as `raytf.fit` would. Joins the configured Ray cluster to
    read its nodes, if one is configured, and leaves it."""
    from raytf._core.function import configured
    from raytf._driver import pickling, preflight

    given = pickling.recorded(train_fn, eval_fn)
    if isinstance(config, Config) and not overrides:
        cfg = copy.deepcopy(config)
    else:
        cfg = load_config(config, overrides, program=given.recorded())
    cfg = configured(cfg, given)
    validate_run(validate(cfg))
    preflight.check_entrypoint(cfg, preflight.python_path(cfg), given)  # (a launch checks this before reserving)
    return preview(cfg, _cluster(cfg))


def _cluster(cfg: Config) -> Cluster:
    from raytf._driver import preflight

    ray = sys.modules.get("ray")  # (never imported: not initialized either, and an embedded plan needs no Ray)
    if ray is not None and ray.is_initialized():  # a notebook's own ray.init(...): what a fit would run on
        from raytf._driver import connect

        return Cluster("the Ray this process is connected to", _nodes(ray), embedded=connect.started_here())
    address = preflight.resolve_address(cfg)
    if address is None:
        return this_machine(cfg.ray.num_cpus)
    import ray

    from raytf._driver import connect

    connect.ensure_ray(cfg)  # a connection only: no actor, no placement group
    try:
        return Cluster(f"the Ray cluster at {address}", _nodes(ray), embedded=False)
    finally:
        ray.shutdown()


def _nodes(ray) -> tuple[dict[str, float], ...]:
    from raytf._driver import nodes

    return tuple(nodes.totals())


def this_machine(num_cpus: int | None) -> Cluster:
    """What an embedded Ray would offer: ray.num_cpus (or every CPU) and this machine's GPUs. Ray sizes its
    `memory` resource when it starts, so a memory reservation is left unchecked."""
    node = {"CPU": float(num_cpus or os.cpu_count() or 1)}
    gpus = _gpu_count()
    if gpus:
        node["GPU"] = float(gpus)
    return Cluster("an embedded Ray on this machine", (node,), embedded=True, unchecked=("memory",))


def _gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVIDIA driver (pynvml raises its NVMLError family): no GPUs
        return 0
