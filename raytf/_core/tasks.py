"""What crosses the boundary between the driver's process and a task's actor, as typed records: what a task is
asked to run for an attempt (`TaskRun`), where it runs (`TaskInfo`, its answer to `address()`) and how its call
ended (`TaskOutcome`). Pure: plain dataclasses, which Ray pickles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raytf._core.checkpoints import CheckpointEntry
from raytf._core.function import PickledFunction
from raytf.errors import WorkerError

if TYPE_CHECKING:
    from raytf.config import Config  # (a task unpickles its Config only with its TaskRun: issue 38)


@dataclass(frozen=True)
class TaskInfo:
    """A started task: where it runs, the port it holds for TF's server, and what it found there."""

    role: str
    index: int
    rank: int
    host: str
    port: int | None
    node_id: str
    pid: int
    gpu_ids: tuple[str, ...] = ()
    cuda_visible_devices: str | None = None
    # Every port of cluster.port_range was taken on its host: the line saying so (the run fails: failure.CONFIG).
    port_error: str | None = None
    # Whether it reads the driver's storage marker (the run directory is shared); None when not asked.
    storage_visible: bool | None = None
    # What of the program it lacks (shipping.Missing: train.script's file, a module), when asked (raytf issue 32).
    code_missing: tuple[Any, ...] = ()
    # Its scratch root and the place it sees it from (_task/scratch.py: machine, namespaces, user): the
    # teardown's sweep runs in the driver's own process where the driver shares the place (local_sweeps).
    scratch_root: str = ""
    place: str = ""
    # Its node's memory as its process sees it (GiB: the machine's, or its cgroup's limit when lower); None: not
    # known there. failure.max_task_rss_gb's default is derived from it (_core/memory.py).
    memory_gib: float | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        """As result.json's `tasks` list it."""
        return {"role": self.role, "index": self.index, "rank": self.rank, "node_id": self.node_id,
                "host": self.host, "port": self.port, "gpu_ids": list(self.gpu_ids),
                "cuda_visible_devices": self.cuda_visible_devices, "address": self.address}


@dataclass(frozen=True)
class TaskRun:
    """What the driver hands one task for an attempt: the same record for a training function, a script and a
    ParameterServerStrategy server (which uses the first five)."""

    cfg: Config  # the tasks' view of the run's config (config.task_view: no `ray` section, no storage keys)
    run_dir: Any  # _storage.RunDir (pickled without keys; each node opens it with its own credentials)
    bus: Any  # the attempt's event bus (its actor handle)
    attempt: int
    python_path: tuple[str, ...] = ()
    tf_config: dict[str, Any] | None = None  # None: a single-task strategy, no cluster
    resume_from: CheckpointEntry | None = None
    is_chief: bool = False
    stream: bool = False  # the driver shows this rank's output (train.stream_output)
    # Elastic training: the run's cluster.num_workers while this attempt runs smaller (None: this attempt's size).
    max_workers: int | None = None
    datasets: dict[str, Any] | None = None  # Ray Data input: {name: ray.data.DataIterator}, this task's shares
    # The function itself, pickled (raytf.fit(train_fn=...)), in place of importing train.entrypoint
    # (train.eval_entrypoint for the evaluator); None: import it.
    function: PickledFunction | None = None
    data_service: Any = None  # the run's tf.data service (a _core.dataservice.Service), for tasks running user code

    @property
    def num_workers(self) -> int:
        """The workers of this attempt's cluster (TF_CONFIG's `worker` tasks; 1 without a cluster)."""
        return len((self.tf_config or {}).get("cluster", {}).get("worker", [])) or 1


@dataclass(frozen=True)
class TaskOutcome:
    """How a task's call ended: `error` None when it succeeded; a training program's position at its end."""

    error: WorkerError | None = None
    stopped: bool = False  # it stopped at the driver's request (a save-and-stop), not at the end of training
    epoch: int | None = None
    step: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def local_sweeps(infos: list[TaskInfo], place: str) -> tuple[set[str], dict[str, tuple[int, ...]]]:
    """What of a teardown's scratch sweep the driver can do in its own process, from `place` (its own): the nodes
    all of whose tasks share that place, and their scratch roots, each with the pids of the tasks that used it
    (the sweep waits for them to be gone). The other nodes' sweep is sent to them as a Ray task, which needs a
    worker process started there (~0.7-0.9 s on one machine: benchmarks/scratch_sweep.py). Pure."""
    by_node: dict[str, list[TaskInfo]] = {}
    for i in infos:
        if i.node_id:
            by_node.setdefault(i.node_id, []).append(i)
    nodes = {n for n, mine in by_node.items() if place and all(i.place == place and i.scratch_root for i in mine)}
    roots: dict[str, tuple[int, ...]] = {}
    for n in sorted(nodes):
        for i in by_node[n]:
            roots[i.scratch_root] = (*roots.get(i.scratch_root, ()), *((i.pid,) if i.pid else ()))
    return nodes, roots
