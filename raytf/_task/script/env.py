"""Script mode: the child's environment and arguments, as the host makes them. Pure."""

from __future__ import annotations

import json
import os
import re
import site

from raytf._core.plan import TaskSpec
from raytf._task.script import feed
from raytf.config import Config

# The directory that holds the raytf package (raytf/_task/script/env.py is three levels below it).
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

_PLACEHOLDER = re.compile(r"\{(checkpoint_dir|log_dir|work_dir|launch_dir|rank|role|index|attempt|run_dir)\}")


def expand_args(args: list, values: dict[str, str]) -> list[str]:
    """train.args with this task's {checkpoint_dir}, {log_dir}, {work_dir}, {launch_dir}, {rank}, {role}, {index},
    {attempt}, {run_dir} filled in, for scripts that take their directories as flags (`--model_dir
    {checkpoint_dir}`, `--data {launch_dir}/data`). Pure."""
    return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], str(a)) for a in args]


def child_env(*, base: dict[str, str], tf_config: dict | None, spec: TaskSpec, cfg: Config, run_uri: str,
              attempt: int, is_chief: bool, num_workers: int, checkpoint_dir: str, resume_from,
              python_path: list[str], log_dir: str = "", launch_dir: str = "", work_dir: str = "",
              max_workers: int | None = None, data_socket: str = "", datasets: list[str] | None = None
              ) -> dict[str, str]:
    """The script's environment: the actor's (CUDA_VISIBLE_DEVICES, TF_USE_LEGACY_KERAS, ...) plus TF_CONFIG
    and the RAYTF_* variables that tell it where it runs; with `datasets` (their names), where `raytf.dataset`
    reads them (`data_socket`). Pure."""
    env = dict(base)
    for key in (feed.SOCKET_ENV, feed.NAMES_ENV):
        env.pop(key, None)
    if datasets:
        env.update(feed.child_vars(data_socket, datasets))
    if tf_config is None:  # single-task strategies: no cluster
        env.pop("TF_CONFIG", None)
    else:
        env["TF_CONFIG"] = json.dumps(tf_config)
    # raytf itself, for the child's `-m raytf._task.script.child`, even when it is not installed (a checkout):
    # last, so it shadows nothing of the user's, and not at all when it is site-packages, which on
    # PYTHONPATH would come before the standard library.
    here = _PACKAGE_PARENT
    site_dirs = {os.path.abspath(p) for p in (*site.getsitepackages(), site.getusersitepackages())}
    # The directory the task was started in comes after train.python_path: the script runs in a directory of its
    # own, and its modules (train.module, its imports) must stay importable.
    paths = [*python_path, *filter(None, [launch_dir]), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep)),
             *([] if here in site_dirs else [here])]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update({
        "RAYTF_RUN_NAME": cfg.run.name or "",
        "RAYTF_RUN_DIR": run_uri,
        "RAYTF_ROLE": spec.role,
        "RAYTF_TASK_INDEX": str(spec.index),
        "RAYTF_RANK": str(spec.rank),
        "RAYTF_IS_CHIEF": "1" if is_chief else "0",
        "RAYTF_NUM_WORKERS": str(num_workers),
        "RAYTF_MAX_WORKERS": str(max_workers or num_workers),  # elastic training: the size wanted
        "RAYTF_ATTEMPT": str(attempt),
        "RAYTF_CHECKPOINT_DIR": checkpoint_dir,
        "RAYTF_LOG_DIR": log_dir,
        "RAYTF_WORK_DIR": work_dir,
        "RAYTF_LAUNCH_DIR": launch_dir,
        "RAYTF_RESUMED_FROM": resume_from.name if resume_from else "",
        "RAYTF_INITIAL_EPOCH": str(resume_from.epoch if resume_from else 0),
        "RAYTF_INITIAL_STEP": str(resume_from.step if resume_from else 0),
    })
    return env
