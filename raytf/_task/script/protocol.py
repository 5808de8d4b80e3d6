"""Script mode's wire protocol, defined once for both sides: what the host (in the task's actor) hands the child
(`ChildSpec`, JSON in its environment) and the messages the child's `ScriptReporter` sends back on the events
pipe (one JSON object a line, told apart by its `kind`). No TensorFlow, no Ray: the child imports it first.

A script may write the events pipe itself: a line is read as the same messages (a `Relayed` of the kinds below), and
one that is not one of them is the script's error (the host stops it)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from raytf._core.events import DATA_SERVICE, EPOCH, HEARTBEAT, PAYLOADS, STEP, Payload

SPEC_ENV = "RAYTF_SCRIPT_SPEC"
# A warm child's (spawn.WarmChild): what it is given at its start, before it knows its script (WarmStart, JSON).
WARM_ENV = "RAYTF_SCRIPT_WARM"

# The kinds of the child's messages besides the rows (STEP, EPOCH, HEARTBEAT: a StepCounter's).
FIT = "fit"  # a Model.fit began
SYNC = "sync"  # the chief's checkpoint directory copied aside, to upload
SYNC_FAILED = "sync_failed"  # it could not be copied whole: raytf's storage failure, not the script's
EXCEPTION = "exception"  # the uncaught exception the script died of
# What the host relays to the driver as it is: a StepCounter's rows and heartbeats, raytf.data_service's notice.
ROWS = (STEP, EPOCH, HEARTBEAT, DATA_SERVICE)


@dataclass(frozen=True)
class ChildSpec:
    """What the child needs to know before the script runs (its environment tells the script the rest)."""

    parent_pid: int
    module: str | None
    script: str | None  # absolute
    args: list[str]
    threads: int
    gpu_memory_growth: bool
    every_steps: int
    heartbeat_s: float
    is_chief: bool
    checkpoint_dir: str
    scratch: str
    epoch: int = 0  # where a resumed attempt starts counting
    step: int = 0
    max_names: int | None = None
    timing: bool = False  # the step-time breakdown, measured in the script's process
    events_fd: int = -1  # the events pipe's write end
    alive_fd: int = -1  # the host's liveness pipe's read end (see child._start_sentinel)

    def to_env(self) -> dict[str, str]:
        return {SPEC_ENV: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls) -> ChildSpec:
        return cls(**json.loads(os.environ.pop(SPEC_ENV)))


@dataclass(frozen=True)
class WarmStart:
    """What a warm child (`python -m raytf._task.script.child --warm`) knows from its start: its host, and the fds
    it holds from then on. It imports TensorFlow, says so on `control_fd` (a socket), then waits there for its
    `Handoff`. The fds keep their numbers across the spawn (pass_fds), so the ChildSpec that comes later names the
    same `events_fd` and `alive_fd`."""

    parent_pid: int
    control_fd: int
    events_fd: int
    alive_fd: int
    idle: bool = True  # import at the lowest CPU priority (a standby's, beside training); not a task's own

    def to_env(self) -> dict[str, str]:
        return {WARM_ENV: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls) -> WarmStart:
        return cls(**json.loads(os.environ.pop(WARM_ENV)))


@dataclass(frozen=True)
class Handoff:
    """A warm child's script, given once its host has a task for it: the ChildSpec a cold child gets in its
    environment, the whole environment a cold child would have started with, and its working directory.
    One JSON line on the control socket."""

    spec: ChildSpec
    env: dict[str, str]
    cwd: str

    def encode(self) -> bytes:
        return (json.dumps({"spec": asdict(self.spec), "env": self.env, "cwd": self.cwd}) + "\n").encode()

    @classmethod
    def decode(cls, line: bytes) -> Handoff:
        obj = json.loads(line)
        return cls(spec=ChildSpec(**obj["spec"]), env=dict(obj["env"]), cwd=str(obj["cwd"]))


def rebased_path(path: list[str], *, was_cwd: str, cwd: str, was_pythonpath: str, pythonpath: str) -> list[str]:
    """A warm child's sys.path once it has its script's place: what `python -m ...` started in `cwd` with
    `pythonpath` would have had. Python's start put the start's directory first (`-m`: the current directory)
    and PYTHONPATH's entries after it; both are replaced, the rest (the standard library, site-packages, .pth
    entries) stays as it is. Pure."""

    def entries(value: str, base: str) -> list[str]:  # (site.py made them absolute, from the start's directory)
        return [os.path.normpath(os.path.join(base, p)) for p in value.split(os.pathsep) if p]

    old = {was_cwd, *entries(was_pythonpath, was_cwd)}
    rest = list(path)
    if rest and rest[0] == was_cwd:
        rest = rest[1:]
    head = [cwd, *entries(pythonpath, cwd)]
    drop = old - set(head)
    return list(dict.fromkeys([*head, *(p for p in rest if p not in drop)]))


@dataclass(frozen=True)
class Relayed:
    """An event the host relays as it is (ROWS), with its payload's record (_core/payloads.py): a StepCounter's row
    or heartbeat, or raytf.data_service's notice that the service is used."""

    kind: str
    payload: Payload

    def position(self) -> tuple[int, int] | None:
        """(epochs completed, step): step rows and heartbeats carry the epoch under way (1-based), epoch rows the
        epochs completed."""
        if self.kind not in (STEP, EPOCH, HEARTBEAT):
            return None
        running = self.kind in (STEP, HEARTBEAT)
        return int(self.payload.epoch) - running, int(self.payload.step)


@dataclass(frozen=True)
class FitStarted:
    """A Model.fit began: its replicas in sync, epochs and steps, its number, and what earlier fits counted."""

    replicas: int
    epochs: int | None
    steps_per_epoch: int | None
    fit: int
    base_epoch: int = 0
    base_step: int = 0

    def position(self) -> None:
        return None


@dataclass(frozen=True)
class Sync:
    """The chief's checkpoint directory, copied to `path`, is checkpoint (epoch, step): the host uploads it."""

    path: str
    epoch: int
    step: int

    def position(self) -> tuple[int, int]:
        return int(self.epoch), int(self.step)


@dataclass(frozen=True)
class SyncFailed:
    """The chief's checkpoint directory could not be copied whole (`reason`): the host stops the script, and the
    attempt fails as raytf's own storage failure (retried), never as the script's."""

    reason: str

    def position(self) -> None:
        return None


@dataclass(frozen=True)
class Raised:
    """The script ended with an uncaught exception of this type (it decides retries), told in a few lines
    (`summary`: _core/tracebacks.summary, made where the exception is)."""

    type: str
    summary: str = ""

    def position(self) -> None:
        return None


Message = Relayed | FitStarted | Sync | SyncFailed | Raised


def encode(msg: Message) -> bytes:
    """One line of the events pipe."""
    fields_ = msg.payload if isinstance(msg, Relayed) else asdict(msg)
    kind = msg.kind if isinstance(msg, Relayed) else _KINDS[type(msg)]
    return (json.dumps({"kind": kind, **fields_}) + "\n").encode()


_KINDS = {FitStarted: FIT, Sync: SYNC, SyncFailed: SYNC_FAILED, Raised: EXCEPTION}
_TYPES = {kind: cls for cls, kind in _KINDS.items()}


def decode(obj: dict[str, Any]) -> Message | None:
    """A line's object as its message; None for a kind nobody acts on. Raises KeyError or TypeError for one that
    is not a message (no kind, a missing or unknown field)."""
    obj = dict(obj)
    kind = obj.pop("kind")
    if kind in ROWS:
        return Relayed(kind, PAYLOADS[kind].of(obj))
    cls = _TYPES.get(kind)
    if cls is None:
        return None
    return cls(**{f.name: obj[f.name] for f in fields(cls) if f.name in obj})  # (extra fields: ignored)
