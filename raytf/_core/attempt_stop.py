"""How an attempt's group stops before its training is over: `Stop` holds why (a preemption notice, a node's drain,
a task's memory, an elastic grow, Ctrl-C: attempt_record.Cause) with what the attempt loop acted on (the notice, the
drain, the memory), which causes wait for the program's next committed checkpoint instead of a save at an agreed
step (a script's drain or memory, a grow while the program saves on its own schedule), and the end the stop comes
to (Stopped, or Interrupted). The attempt loop (_core/attempt_loop.py) keeps one per attempt and decides when the
group stops. Pure: no Ray, no TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass, field

from raytf._core import events as ev
from raytf._core.attempt_record import Cause, Drain, Interrupted, Recycle, Stopped

# The cause a commit stops the group for when several wait for it: a drain first (its node goes), then memory.
_BY_COMMIT = (Cause.DRAIN, Cause.RECYCLE, Cause.RESIZE)


@dataclass
class Stop:
    """The stop of one attempt's group, as far as it is decided."""

    cause: Cause | None = None  # why every task is to save and stop (or was stopped)
    notice: ev.Event | None = None  # the preemption notice acted on
    drain: Drain | None = None  # the drain acted on (one per attempt)
    recycle: Recycle | None = None  # the memory acted on
    # What waits for the program's next commit while the group trains on: a script's drain or memory (a script
    # cannot save at an agreed step), an elastic grow while the program saves on its own schedule (a script,
    # ParameterServerStrategy).
    at_commit: set[Cause] = field(default_factory=set)

    def on_commit(self) -> Cause | None:
        """What a committed checkpoint stops the group for, if anything waits for one."""
        return next((cause for cause in _BY_COMMIT if cause in self.at_commit), None)

    def end(self, saved: bool) -> Interrupted | Stopped:
        """The attempt's end once its group stopped (`saved`: the save, or the commit, completed); a Stopped carries
        the drain or the memory only when it is their stop."""
        if self.cause is Cause.INTERRUPTED:
            return Interrupted(saved=saved)
        return Stopped(self.cause, saved=saved, notice=self.notice,
                       drain=self.drain if self.cause is Cause.DRAIN else None,
                       recycle=self.recycle if self.cause is Cause.RECYCLE else None)
