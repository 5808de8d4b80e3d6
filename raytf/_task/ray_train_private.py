"""Ray Train's private seam that raytf.compat relies on, all of it here (a private API: for the list of those raytf
touches). Ray 2.60's public `ray.train.report`, `get_checkpoint`, `get_context`, `get_dataset_shard` (Ray Train
v2: ray/train/v2/api/train_fn_utils.py) each ask `get_train_fn_utils()` for the process's `TrainFnUtils` and call
it; Ray Train's worker sets one with `set_train_fn_utils` before the user's loop runs (and `requires_train_worker`
lets the call through only when one is set). A raytf task running a Ray Train loop sets raytf's
(`raytf._task.raytrain.RaytfTrainFnUtils`, a subclass of `TrainFnUtils`) in the same way, for the loop's duration.

Used: ray.train.v2._internal.execution.train_fn_utils.{TrainFnUtils, set_train_fn_utils, get_train_fn_utils} and
ray.train.v2._internal.constants.is_v2_enabled, listed with every other private API raytf touches in
raytf/_core/private_api_table.py (RAY_TRAIN_LOOPS), checked against the Ray version there (TESTED_RAY). If a Ray
release moves or changes one, `check()` raises one RayTrainMoved line naming it and the fix; it is a
configuration error, never retried.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from raytf._core import private_apis as apis
from raytf._core.failure import CONFIG
from raytf.errors import RaytfError

log = logging.getLogger(__name__)

TESTED_RAY = apis.VERIFIED["ray"]
PRIVATE_APIS = tuple(a.dotted for a in apis.by_feature(apis.RAY_TRAIN_LOOPS))


class RayTrainMoved(RaytfError):
    """This Ray has no Ray Train v2 seam as raytf.compat knows it (a configuration error: never retried)."""

    failure_kind = CONFIG


def _seam() -> Any:
    import ray

    for api in apis.by_feature(apis.RAY_TRAIN_LOOPS):
        why = apis.problem(api)
        if why is not None:
            raise RayTrainMoved(
                f"raytf.compat: Ray {ray.__version__} moved Ray Train v2's private train_fn_utils ({api.dotted} "
                f"{why}), through which raytf makes ray.train.report and its siblings reach raytf (tested with Ray "
                f"{TESTED_RAY}). Fix: pip install 'ray[train]=={TESTED_RAY}.*', or a raytf release that supports "
                f"Ray {ray.__version__}")
    from ray.train.v2._internal.constants import is_v2_enabled
    from ray.train.v2._internal.execution import train_fn_utils

    if not is_v2_enabled():
        raise RayTrainMoved("raytf.compat: RAY_TRAIN_V2_ENABLED=0 makes ray.train.report Ray Train v1's, which "
                            "raytf does not map. Fix: unset RAY_TRAIN_V2_ENABLED (v2 is Ray 2.60's default)")
    if not ray.__version__.startswith(TESTED_RAY + "."):
        log.debug("raytf.compat: Ray %s (tested with %s)", ray.__version__, TESTED_RAY)
    return train_fn_utils


def check() -> None:
    """Raise RayTrainMoved now, on the driver, when this Ray lacks the seam (the tasks' Ray is the same)."""
    _seam()


def base_class() -> type:
    """Ray Train's abstract TrainFnUtils, which raytf's bridge implements."""
    return _seam().TrainFnUtils


@contextlib.contextmanager
def installed(utils: Any) -> Iterator[None]:
    """`utils` behind ray.train's public functions in this process while the block runs."""
    seam = _seam()
    seam.set_train_fn_utils(utils)
    try:
        yield
    finally:
        seam.set_train_fn_utils(None)
