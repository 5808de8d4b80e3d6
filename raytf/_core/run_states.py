"""The run's states, each carrying its data (the run machine's, _core/run_machine.py), which may follow which, and
the records its inputs carry (an attempt's end as the driver concluded it; an elastic grow's look). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from raytf._core import elastic, failure
from raytf._core.attempt_record import Attempt, End
from raytf.errors import TrainingFailedError, WorkerError


@dataclass(frozen=True)
class AttemptEnd:
    """An attempt's end as the driver concluded it: the loop's `end`, and for any end but Done the errors that make
    it (the tasks' own WorkerErrors, a hang's with its stacks, a preemption's or a resize's)."""

    end: End
    errors: tuple[WorkerError, ...] = ()
    unreachable: frozenset[str] = frozenset()  # nodes whose tasks stopped answering: the next attempt avoids them
    node_lost: bool = False  # a node of the attempt is gone (Ray declared it dead, or it is unreachable)
    lost: tuple[tuple[int, WorkerError, float], ...] = ()  # tasks lost without ending it (PS workers), when


# -- the states ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Placing:
    """The attempt's group is to be placed: at the first size of `tries` that can be, away from `avoid`."""

    attempt: Attempt
    tries: tuple[elastic.Try, ...]
    avoid: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Training:
    attempt: Attempt
    size: int


@dataclass(frozen=True)
class Retrying:
    """`attempt` failed and is retried: the checkpoint to resume from is to be chosen (and verified); the next
    attempt keeps off `avoid`, the nodes this one found unreachable."""

    attempt: Attempt
    verdict: failure.Verdict
    avoid: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Ended:
    status: str
    error: TrainingFailedError | None = None


State = Placing | Training | Retrying | Ended

# Which state may follow which (run_machine.py's table): None is before `begin`.
NEXT: dict[type | None, tuple[type, ...]] = {
    None: (Placing, Ended),
    Placing: (Training, Ended),
    Training: (Training, Retrying, Ended),
    Retrying: (Placing, Ended),
    Ended: (),
}


class InvalidTransition(RuntimeError):
    """A run's state asked to change in a way its table does not allow: the caller's bug (an input given in the
    wrong state), raised before anything changes."""


@dataclass(frozen=True)
class Grow:
    """Elastic training, the group smaller than cluster.num_workers: grow if the `missing` workers' capacity is
    there (0: no look needed), saving at an agreed step first (`save_now`) or at the program's next commit."""

    save_now: bool
    missing: int
