"""The tf.data service on Ray, the pure rules: what its servers reserve and run with, the address record the
training tasks get, the job names, what TF cannot serve, what a lost server costs, and the lines that say so.

One dispatcher and `data_service.workers` workers per attempt (TF's DispatchServer and WorkerServer, each in an
actor of its own), in a placement group of their own: bundle i holds worker i, and the dispatcher (which reserves
nothing: it hands out splits and keeps the job table) runs in bundle 0, beside worker 0.

A server that dies is started again at its address (host:port), in its bundle (on its node while the node lives):
the dispatcher from its journal; a worker takes its tasks back, which the dispatcher keeps by its address. TF's
consumers wait for every task of a job to end, a lost worker's too, and a worker at another address never gets them
(a job then never ends: seen here, TF 2.21); so a server lost with its node fails the attempt (the retry path).
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass
from typing import Any

from raytf._core import brief
from raytf._core.failure import CONFIG
from raytf._core.plan import TASK_ENV, Plan, TaskSpec, shortfall
from raytf._core.shipping import env_text, task_level
from raytf.config import Config, ProcessingMode

DISPATCHER, WORKER = "dispatcher", "worker"
ROLE = "data_service"  # WorkerError.role of a failure of the service's servers
# The servers' roles as tasks (TaskSpec.role): their actors' names and logs (logs/data_service-worker0-attempt1.log).
DISPATCHER_ROLE, WORKER_ROLE = f"{ROLE}-{DISPATCHER}", f"{ROLE}-{WORKER}"

# The environment variable a task's process (and a script's child) finds the run's service in (Service.to_json).
SERVICE_ENV = "RAYTF_DATA_SERVICE"

# Times one slot (the dispatcher, or worker i) is started again within an attempt; one more loss fails the attempt
# (the normal retry path): a pipeline that kills its worker every time would otherwise be restarted for ever.
MAX_RESTARTS = 3


@dataclass(frozen=True)
class Service:
    """What a training task needs of the run's service: where the dispatcher listens (host:port, as the others
    reach it), the processing mode, and what names the jobs (run, attempt)."""

    dispatcher: str
    processing_mode: str
    workers: int
    run: str
    attempt: int

    @property
    def target(self) -> str:
        return f"grpc://{self.dispatcher}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Service:
        return cls(**json.loads(text))


def job_name(service: Service, *, group: str, epoch: int, call: int) -> str:
    """The tf.data service job a `ctx.data_service(ds)` call reads from. Every trainer of an attempt makes the same
    calls in the same order at the same epoch, so they name the same job and share it (in distributed_epoch mode,
    each element goes to one of them); a retry's attempt names new jobs, so it never joins a job (and its cursor) the
    failed attempt left. Within a job each new iteration of the dataset (Keras: each epoch) is a new pass, which the
    trainers' i-th iterations share; a dataset made anew each epoch gets a job of its own by its epoch. `group`
    keeps the evaluator's jobs apart from the trainers' (it would take their elements)."""
    return f"raytf.{service.run}.a{service.attempt}.{group}.e{epoch}.{call}"


def bundles(cfg: Config) -> list[dict[str, float]]:
    """One placement-group bundle per service worker (Ray resource names)."""
    d = cfg.data_service
    bundle = {"CPU": float(d.cpus)} if d.cpus else {}
    bundle.update({k: float(v) for k, v in d.resources.items()})
    return [dict(bundle) for _ in range(d.workers)]


def plans(cfg: Config) -> tuple[Plan, Plan, tuple[int, ...]]:
    """The servers as tasks: (what is reserved: one bundle per worker, SPREAD; the group: the dispatcher, then the
    workers; each of the group's tasks' bundle index). The dispatcher reserves nothing of its own: it hands out
    splits and keeps the job table, in bundle 0 beside worker 0 (a restart lands on its node)."""
    d = cfg.data_service
    ports = (cfg.cluster.port_range[0], cfg.cluster.port_range[1]) if cfg.cluster.port_range else None
    workers = tuple(TaskSpec(WORKER_ROLE, i, i + 1, d.cpus, 0.0, None, dict(d.resources), ports)
                    for i in range(d.workers))
    dispatcher = TaskSpec(DISPATCHER_ROLE, 0, 0, 0.0, 0.0, None, {}, ports)
    return Plan(workers, "SPREAD"), Plan((dispatcher, *workers), "SPREAD"), (0, *range(d.workers))


def server_name(role: str, index: int) -> str:
    """How lines and result.json name a server: "dispatcher", "worker 1"."""
    return DISPATCHER if role in (DISPATCHER, DISPATCHER_ROLE) else f"{WORKER} {index}"


def threads(cfg: Config) -> int:
    """TF threads of a service worker: its CPU share, at least one (as a task's)."""
    return max(1, int(cfg.data_service.cpus))


def runtime_env(cfg: Config, role: str) -> dict[str, Any]:
    """A server actor's runtime_env: the user's (the pipeline may need its env vars, files or packages), plus what
    must hold before TensorFlow is imported there (plan.TASK_ENV: TF's gRPC servers bind the port the actor holds)
    and OpenMP's threads at the server's share. The user's own env_vars win, as for the tasks."""
    env = copy.deepcopy(task_level(cfg.ray.runtime_env))  # (a local working_dir is the job's: shipping.task_level)
    env_vars = env_text(env.get("env_vars"))
    for k, v in TASK_ENV.items():
        env_vars.setdefault(k, v)
    env_vars.setdefault("OMP_NUM_THREADS", str(threads(cfg) if role in (WORKER, WORKER_ROLE) else 1))
    env["env_vars"] = env_vars
    return env


# -- what cannot be served -------------------------------------------------------------------------------------
# TF's tf.data service runs a pipeline from its serialized graph in another process: Python code in it cannot go
# there (tf.data.experimental.service's "Limitations"). The ops that carry it, and the call that made each.
_PYTHON_OPS = {
    "GeneratorDataset": "tf.data.Dataset.from_generator",
    "EagerPyFunc": "tf.py_function",
    "PyFunc": "tf.numpy_function",
    "PyFuncStateless": "tf.numpy_function",
}


class Unservable(ValueError):
    """A pipeline the tf.data service cannot run (`ctx.data_service(ds)`): a configuration error, never retried
    (`failure_kind`, which the task reports it as)."""

    failure_kind = CONFIG


def unservable(ops: set[str]) -> str | None:
    """Why a pipeline whose graph (its functions' included) holds `ops` cannot be served, or None."""
    found = sorted({what for op, what in _PYTHON_OPS.items() if op in ops})
    if "tf.data.Dataset.from_generator" in found:  # (its generator runs through a PyFunc: one name says it)
        found.remove("tf.numpy_function")
    if not found:
        return None
    return (f"ctx.data_service(ds): the pipeline uses {' and '.join(found)}, which runs Python code: TF's tf.data "
            "service cannot run it in its workers (tf.data.experimental.service, Limitations: no Python-based "
            "processing). Fix: express that step with TensorFlow ops (tf.io, tf.image, tf.strings, "
            "tf.experimental.numpy), or keep this pipeline in the trainers (data_service.workers=0)")


def not_a_dataset(value: Any) -> str:
    return (f"ctx.data_service(ds): ds is a {type(value).__module__}.{type(value).__name__}, not a tf.data.Dataset. "
            "Fix: pass the tf.data pipeline itself (before strategy.experimental_distribute_dataset)")


def unused(workers: int) -> str:
    """The end-of-run warning when no task of an attempt asked for the service."""
    return (f"data_service.workers={workers}: no task called ctx.data_service(ds) (a script: raytf.data_service(ds)), "
            "so the service's workers served nothing and their CPUs sat idle. Fix: pass the pipeline through it "
            "in the training function, or data_service.workers=0")


def steps_warning(steps_per_epoch: int) -> str:
    """Keras fit given steps_per_epoch keeps one iterator for all epochs: a finite served dataset then ends after
    its first pass (tf-keras' DataHandler) and fit stops early, with a warning of its own."""
    return (f"ctx.data_service(ds) with train.steps_per_epoch={steps_per_epoch}: the dataset is finite, so Keras fit "
            "(which keeps one iterator for all epochs when given steps_per_epoch) runs out after its first pass. "
            "Fix: train.steps_per_epoch=null (each epoch is one pass, every element once), or ds.repeat() before "
            "ctx.data_service(ds) (epochs of steps_per_epoch steps)")


def unknown_dims(features: list[tuple[str, tuple[int | None, ...]]]) -> str | None:
    """Under MultiWorkerMirroredStrategy a worker whose share ran out steps on with zero-size stand-ins for its input
    while another still has data (tf.distribute's per-step agreement on the end of an epoch). TF makes them from the
    element's shapes, zeroing every unknown dimension and the first only of a fully known shape (tensorflow
    distribute/input_lib.py, _dummy_tensor_fn): an unknown dimension other than the batch becomes 0 while the batch
    keeps its size, and the step then fails (a Keras Dense layer: "Matrix size-incompatible") or computes on empty
    images. `features`: (name, shape) of the dense tensors of an element; the warning, or None."""
    bad = [(name, shape) for name, shape in features if len(shape) > 1 and None in shape[1:]]
    if not bad:
        return None
    shown = ", ".join(f"{name} {_shape(shape)}" for name, shape in bad)
    return (f"ctx.data_service(ds): {shown} has unknown dimensions besides the batch: at an epoch's end a worker that "
            "ran out steps on with stand-ins TF makes from these shapes, zeroing the unknown ones, not the batch, and "
            "the step fails or trains on empty inputs. Fix: give the pipeline static shapes, e.g. "
            "x = tf.ensure_shape(x, [None, 28, 28, 3]) in its last map")


def _shape(shape: tuple[int | None, ...]) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ")"


# -- placement -----------------------------------------------------------------------------------------------------
_FEWER = ("Fix: fewer service workers (data_service.workers), less per worker (data_service.cpus, "
          "data_service.resources), or nodes that offer them")
FIX = f"{_FEWER}, or raise cluster.placement_timeout_s"  # a cluster that may grow, or is busy


def fix(embedded: bool) -> str:
    """What to change when the service's group cannot be placed: never a longer wait on an embedded Ray."""
    return _FEWER if embedded else FIX


def placement_problem(cfg: Config, task_bundles: list[dict[str, float]], nodes: list[dict[str, float]],
                      task_strategy: str) -> str | None:
    """Before anything is reserved, on a cluster that cannot grow (an embedded Ray): why the service's workers
    cannot be placed, alone or beside the run's tasks (their two placement groups together); None when they can."""
    mine = bundles(cfg)
    if not mine:
        return None
    what = (f"data_service.workers={cfg.data_service.workers}, each {fmt_bundle(mine[0])} (data_service.cpus, "
            "data_service.resources)")
    why = shortfall(mine, "SPREAD", nodes)
    if why:
        return f"{what} can never be placed on this Ray: {why}. {_FEWER}"
    why = shortfall(mine + list(task_bundles), "SPREAD" if task_strategy != "STRICT_PACK" else task_strategy, nodes)
    if why:
        return f"{what} can never be placed beside the run's tasks on this Ray: {why}. {_FEWER}"
    return None


def fmt_bundle(bundle: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(bundle.items())) + "}"


# -- lost servers ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Restart:
    """Start the slot's server again at its address (a dispatcher from its journal; a worker takes its tasks back)."""

    role: str
    index: int


@dataclass(frozen=True)
class Fail:
    """Fail the attempt (the normal retry path) with this message."""

    message: str
    kind: str


def on_lost(role: str, index: int, restarts: int, why: str, *, node_alive: bool) -> Restart | Fail:
    """What to do when a server's actor died (`restarts`: times this slot was started again in this attempt;
    `node_alive`: Ray still counts its node alive, where its address is)."""
    name = "the dispatcher" if role == DISPATCHER else f"service worker {index}"
    if not node_alive:
        held = "its journal and its address" if role == DISPATCHER else \
            "its address, and the tasks TF's consumers wait for by it"
        return Fail(f"tf.data service: {name} was lost with its node ({why}): {held} went with it", "system")
    if restarts >= MAX_RESTARTS:
        return Fail(f"tf.data service: {name} was lost {restarts + 1} times in this attempt (last: {why})", "system")
    return Restart(role, index)


def lost_line(role: str, index: int, why: str, mode: ProcessingMode | str) -> str:
    """The warning when a server is lost and started again: what it means for the elements."""
    if role == DISPATCHER:
        return (f"tf.data service: the dispatcher was lost ({why}); starting it again at the same address from its "
                "journal (the trainers and workers reconnect; nothing is lost)")
    mode = getattr(mode, "value", mode)
    cost = ("the elements it had taken from the dispatcher and not yet delivered are lost for this epoch "
            "(distributed_epoch visits each element at most once when a worker is lost)"
            if mode == ProcessingMode.distributed_epoch.value else
            "its tasks start the pipeline over (parallel_epochs)")
    return f"tf.data service: worker {index} was lost ({why}); starting it again at its address: {cost}"


def input_line(summary: dict[str, Any] | None) -> str | None:
    """`python -m raytf.runs show`'s line for result.json's `data_service` (None: the run had none)."""
    if not isinstance(summary, dict) or not summary.get("workers"):
        return None
    last = (summary.get("attempts") or [{}])[-1]
    each = fmt_bundle({"CPU": summary.get("cpus", 0), **(summary.get("resources") or {})})
    used = last.get("used_by")
    line = (f"input      served by the tf.data service: {summary['workers']} worker(s) {each} "
            f"({summary.get('processing_mode')}), dispatcher {last.get('dispatcher', '-')}; read by "
            + (f"rank(s) {brief.spans(used)}" if used else "no task (it served nothing)"))
    lost = summary.get("lost") or []
    if lost:
        line += f"; {len(lost)} server(s) lost: " + brief.few(f"{x['server']} (attempt {x['attempt']})" for x in lost)
    return line
