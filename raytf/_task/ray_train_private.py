"""Ray Train's private seams that raytf.compat relies on, all of them here (private APIs: for the list of those raytf
touches). Ray 2.60's public `ray.train.report`, `get_checkpoint`, `get_context`, `get_dataset_shard` are Ray Train
v2's (ray/train/v2/api/train_fn_utils.py), or v1's when RAY_TRAIN_V2_ENABLED=0 was set as the process imported
ray.train (ray/train/_internal/session.py, ray/train/context.py; Ray's own CI still runs its TensorFlow trainer's
test, the regression example and the TensorFlow guide's doctest that way).

- v2's each ask `get_train_fn_utils()` for the process's `TrainFnUtils` and call it; Ray Train's worker sets one
  with `set_train_fn_utils` before the user's loop runs.
- v1's each ask `get_session()` for the module global `_session` (Ray Train v1's `_TrainSession`) and read it.

A raytf task running a Ray Train loop sets both, for the loop's duration: raytf's `TrainFnUtils` (a subclass of
Ray's, `raytf._task.raytrain.RaytfTrainFnUtils`) and its stand-in for v1's session (`raytrain.RaytfV1Session`,
which asks the same bridge). Whichever functions the loop's process bound then reach raytf, whatever that
process's environment was when it imported ray.train (a standby's, a worker of a cluster started elsewhere).

Used: ray.train.v2._internal.execution.train_fn_utils.{TrainFnUtils, set_train_fn_utils, get_train_fn_utils} and
ray.train.v2._internal.constants.is_v2_enabled (RAY_TRAIN_LOOPS: required), and
ray.train._internal.session.{_session, get_session} and what v1's functions read of the session (RAY_TRAIN_V1),
listed with every other private API raytf touches in raytf/_core/private_api_table.py, checked against the Ray
version there (TESTED_RAY). If a Ray release moves or changes one of v2's, `check()` raises one RayTrainMoved line
naming it and the fix; it is a configuration error, never retried. If it moves v1's, only v2's seam is set (a
debug line), and a driver or task whose RAY_TRAIN_V2_ENABLED=0 makes ray.train v1's is refused in the same way.
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
PRIVATE_APIS = tuple(a.dotted for a in (*apis.by_feature(apis.RAY_TRAIN_LOOPS), *apis.by_feature(apis.RAY_TRAIN_V1)))


class RayTrainMoved(RaytfError):
    """This Ray has no Ray Train seam as raytf.compat knows it (a configuration error: never retried)."""

    failure_kind = CONFIG


def _seam() -> Any:
    """Ray Train v2's train_fn_utils module, checked."""
    import ray

    for api in apis.by_feature(apis.RAY_TRAIN_LOOPS):
        why = apis.problem(api)
        if why is not None:
            raise RayTrainMoved(
                f"raytf.compat: Ray {ray.__version__} moved Ray Train v2's private train_fn_utils ({api.dotted} "
                f"{why}), through which raytf makes ray.train.report and its siblings reach raytf (tested with Ray "
                f"{TESTED_RAY}). Fix: pip install 'ray[train]=={TESTED_RAY}.*', or a raytf release that supports "
                f"Ray {ray.__version__}")
    from ray.train.v2._internal.execution import train_fn_utils

    if not ray.__version__.startswith(TESTED_RAY + "."):
        log.debug("raytf.compat: Ray %s (tested with %s)", ray.__version__, TESTED_RAY)
    return train_fn_utils


def _v1_session_module() -> Any | None:
    """Ray Train v1's session module, checked; None when this Ray moved what raytf sets or relies on there (a debug
    line; RayTrainMoved when this process's RAY_TRAIN_V2_ENABLED=0 makes ray.train's functions v1's)."""
    import ray
    from ray.train.v2._internal.constants import is_v2_enabled

    for api in apis.by_feature(apis.RAY_TRAIN_V1):
        why = apis.problem(api)
        if why is None:
            continue
        if not is_v2_enabled():
            raise RayTrainMoved(
                f"raytf.compat: RAY_TRAIN_V2_ENABLED=0 makes ray.train.report Ray Train v1's, and Ray "
                f"{ray.__version__} moved v1's private session ({api.dotted} {why}), through which raytf makes it "
                f"reach raytf (tested with Ray {TESTED_RAY}). Fix: unset RAY_TRAIN_V2_ENABLED (v2 is Ray's "
                f"default), or pip install 'ray[train]=={TESTED_RAY}.*'")
        log.debug("raytf.compat: Ray Train v1's seam not set (%s %s): only v2's ray.train functions reach raytf",
                  api.dotted, why)
        return None
    from ray.train._internal import session

    return session


def check() -> None:
    """Raise RayTrainMoved now, on the driver, when this Ray lacks the seam its ray.train needs (the tasks' Ray is
    the same)."""
    _seam()
    _v1_session_module()


def base_class() -> type:
    """Ray Train's abstract TrainFnUtils, which raytf's bridge implements."""
    return _seam().TrainFnUtils


@contextlib.contextmanager
def installed(utils: Any, v1_session: Any) -> Iterator[None]:
    """`utils` behind Ray Train v2's public functions in this process while the block runs, and `v1_session` behind
    v1's (when this Ray has v1's seam as raytf knows it); what was there before is put back after."""
    seam = _seam()
    v1 = _v1_session_module()
    seam.set_train_fn_utils(utils)
    before = v1._session if v1 is not None else None
    if v1 is not None:
        v1._session = v1_session
    try:
        yield
    finally:
        seam.set_train_fn_utils(None)
        if v1 is not None:
            v1._session = before
