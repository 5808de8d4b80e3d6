"""One error hierarchy for raytf: every failure a user can see is a RaytfError."""

from __future__ import annotations


class RaytfError(Exception):
    """Base class of every error raytf raises on purpose."""


class ConfigError(RaytfError, ValueError):
    """A configuration value is invalid; the message names the key, the value and the fix (the CLI exits 2)."""


class PlacementError(RaytfError):
    """The cluster cannot host the requested tasks: `never` when it can never hold them (what it has is short of
    what the plan asks for: a configuration to change, exit 2 from the CLI, as `--dry-run` says of the same plan),
    else the placement group was not ready in time (exit 1: the run failed)."""

    def __init__(self, message: str, *, never: bool = False) -> None:
        super().__init__(message)
        self.never = never

    def __reduce__(self):
        return (_rebuild_placement_error, (str(self), self.never))


class StorageError(RaytfError):
    """The run directory cannot be read or written."""


class WorkerError(RaytfError):
    """A TF task failed; carries the rank, role, node and the formatted remote traceback.

    Only plain strings are stored so the error pickles across processes unchanged.
    """

    def __init__(
        self,
        message: str,
        *,
        role: str = "",
        rank: int = -1,
        node_id: str = "",
        remote_traceback: str = "",
        kind: str = "user",
        error_type: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.role = role
        self.rank = rank
        self.node_id = node_id
        self.remote_traceback = remote_traceback
        # See raytf._core.failure: "user", "system", "peer", "hang" or "startup".
        self.kind = kind
        self.error_type = error_type  # the remote exception's class name

    def __reduce__(self):
        return (
            _rebuild_worker_error,
            (self.message, self.role, self.rank, self.node_id, self.remote_traceback, self.kind, self.error_type),
        )

    def __str__(self) -> str:
        where = f"{self.role} {self.rank}" if self.role else f"rank {self.rank}"
        node = f" on node {self.node_id[:12]}" if self.node_id else ""
        return f"{where}{node}: {self.message}"


def _rebuild_placement_error(message: str, never: bool) -> PlacementError:
    return PlacementError(message, never=never)


def _rebuild_worker_error(message, role, rank, node_id, remote_traceback, kind, error_type) -> WorkerError:
    return WorkerError(message, role=role, rank=rank, node_id=node_id, remote_traceback=remote_traceback,
                       kind=kind, error_type=error_type)


class TrainingFailedError(RaytfError):
    """The run failed; `failures` holds one WorkerError per failed task, keyed by (role, rank), the root cause
    first. Raised by `raytf.fit` (unless `raise_on_failure=False`) with `result`, the run's Result; `rank`, `role`,
    `node_id`, `host` and `remote_traceback` say where the root cause happened."""

    def __init__(self, message: str, failures: dict[tuple[str, int], WorkerError] | None = None, *,
                 result=None) -> None:
        super().__init__(message)
        self.failures = dict(failures or {})
        self.result = result  # raytf.Result (api): what the run left, when raytf.fit raised it

    def __reduce__(self):
        return (_rebuild_training_failed, (self.args[0], self.failures, self.result))

    @property
    def root(self) -> WorkerError | None:
        """The first failure: the root cause (the driver orders them so)."""
        return next(iter(self.failures.values()), None)

    @property
    def rank(self) -> int:
        return self.root.rank if self.root is not None else -1

    @property
    def role(self) -> str:
        return self.root.role if self.root is not None else ""

    @property
    def node_id(self) -> str:
        return self.root.node_id if self.root is not None else ""

    @property
    def remote_traceback(self) -> str:
        return self.root.remote_traceback if self.root is not None else ""

    @property
    def host(self) -> str:
        """The failed task's host (its address in the cluster spec), from the run's tasks; "" when not known."""
        tasks = getattr(self.result, "tasks", None) or []
        return next((str(t.get("host", "")) for t in tasks
                     if t.get("role") == self.role and t.get("rank") == self.rank), "")

    def to_json(self) -> dict:
        """result.json's `error`: the message, and where the root cause (the first failure) happened."""
        out: dict = {"message": str(self)}
        first = self.root
        if first is not None:
            out.update(role=first.role, rank=first.rank, node_id=first.node_id, kind=first.kind,
                       traceback=first.remote_traceback)
        return out


def _rebuild_training_failed(message, failures, result) -> TrainingFailedError:
    return TrainingFailedError(message, failures, result=result)
