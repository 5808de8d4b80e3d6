"""What the attempt loop (_core/attempt_loop.py) and the driver that runs it (_core/attempt_drive.py's `drive`)
exchange besides the events and the clock: the one report of a task group's own, a task's call returned
(`Finished`), and the actions the loop returns for the driver to carry out against the group (`AskSave`, `Decide`,
`Release`). Plain frozen records, so the loop is tested over a fake group. Pure: no Ray, no TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass

from raytf.errors import WorkerError


# -- actions: what the driver does against the group -------------------------------------------
@dataclass(frozen=True)
class AskSave:
    """Ask every task running user code to pause and report its step (events.EventBuffer's save-now)."""

    count: int
    timeout_s: float


@dataclass(frozen=True)
class Decide:
    save_at: int


@dataclass(frozen=True)
class Release:
    """Training is over: the servers' serve() calls return, the evaluator finishes its last round."""


Action = AskSave | Decide | Release


# -- the group's report ----------------------------------------------------------------------
@dataclass(frozen=True)
class Finished:
    """A task's call returned: `error` None when it succeeded. `alone`: a ParameterServerStrategy worker whose
    process died on a host that is still up (TF's coordinator moves its functions to the other workers)."""

    rank: int
    error: WorkerError | None = None
    alone: bool = False
