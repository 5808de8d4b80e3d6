"""What a task runs inside its call (_task/call.py), on TensorFlow's side: the user's training function (every
MWMS worker, the ParameterServerStrategy chief, the evaluator) and a ParameterServerStrategy server. A script's
is script/host.py's. Runs in the task's process only (the actor imports this module inside its methods)."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

import ray

from raytf._core import events as ev
from raytf._core.function import PickledFunction
from raytf._core.plan import EVALUATOR
from raytf._core.tasks import TaskOutcome
from raytf._storage import task_log_dir, task_workdir
from raytf._task import keras3, usercode
from raytf._task.call import TaskCall
from raytf._task.upload import upload_outputs


def import_entrypoint(entrypoint: str):
    module_name, _, fn_name = entrypoint.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, fn_name)
    except AttributeError:
        raise AttributeError(f"train.entrypoint: module {module_name!r} has no function {fn_name!r}") from None


def load_function(function: PickledFunction):
    """A function given to raytf.fit as a value (train_fn=, eval_fn=): unpickled here, once the task's python_path
    is in place (one pickled by reference imports its module now; one sent by value imports nothing of the
    driver's __main__). Ray's cloudpickle wrote it; plain pickle reads it."""
    import pickle

    return pickle.loads(function.data)


class WorkingDir:
    """The training function runs in a directory of its own (relative paths it writes, a ModelCheckpoint("ckpt")
    say, would otherwise collide between the tasks of one host); imports keep resolving as before."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        self._was = ""

    def __enter__(self) -> WorkingDir:
        self._was = os.getcwd()
        # sys.path's "" (or ".") means the current directory: it keeps meaning the one the task started in.
        sys.path[:] = [self._was if p in ("", ".") else p for p in sys.path]
        os.chdir(self.path)
        return self

    def __exit__(self, *exc) -> None:
        os.chdir(self._was)


def prepare(call: TaskCall):
    """TF_CONFIG, train.python_path and TF's thread caps in place; returns _task.tf_runtime (imports TF)."""
    run = call.run
    # Single-task strategies (mirrored, central_storage) run without a cluster: no TF_CONFIG at all.
    if run.tf_config is None:
        os.environ.pop("TF_CONFIG", None)
    else:
        os.environ["TF_CONFIG"] = json.dumps(run.tf_config)
    for p in reversed(usercode.task_paths(run.python_path)):
        if p not in sys.path:
            sys.path.insert(0, p)
    from raytf._task import tf_runtime

    tf_runtime.configure(run.cfg.cluster.threads or call.spec.threads, run.cfg.cluster.gpu_memory_growth)
    return tf_runtime


def start_server(call: TaskCall):
    """A ParameterServerStrategy ps/worker task: TF's gRPC server, listening on the port the actor held."""
    spec = call.spec
    began = time.time()
    tf_runtime = prepare(call)
    times = {"tf_import_start": began, "tf_imported": time.time()}
    server = tf_runtime.start_server(spec.role, spec.index)
    call.actor.release_port()
    call.emit(ev.STARTED, ev.Started(replicas=0, **tf_runtime.versions(), timeline=times))
    call.succeeded()
    return server


def run_function(call: TaskCall) -> TaskOutcome:
    """The user's training function, with its TrainContext: every MWMS worker, the PS chief, the evaluator."""
    run, spec = call.run, call.spec
    cfg, run_dir = run.cfg, run.run_dir
    # The TensorFlow import's and the strategy's times, for the launch's timeline (in the STARTED event, wall clock;
    # a standby's import was done before: then its "import" here takes no time).
    began = time.time()
    tf_runtime = prepare(call)
    times = {"tf_import_start": began, "tf_imported": time.time()}
    evaluator = spec.role == EVALUATOR
    keras3.install()  # (before the program's own imports: its `import keras` is watched)
    fn = (load_function(run.function) if run.function is not None
          else import_entrypoint(cfg.train.eval_entrypoint if evaluator else cfg.train.entrypoint))
    from raytf._task.context import TrainContext, TrainingStopped

    if cfg.train.ray_train and not evaluator:
        # A Ray Train loop builds its own strategy (a process builds one collective strategy, once); its TF server
        # takes the port this task holds then, released when the call ends.
        from raytf._task import raytrain

        strategy, fn = raytrain.no_strategy_yet(), raytrain.loop(fn)
    else:
        strategy = tf_runtime.build_strategy(cfg, spec.role)
        call.actor.release_port()  # TF's server holds the port now (MWMS); ours can go
    times["strategy_ready"] = time.time()
    call.emit(ev.STARTED, ev.Started(replicas=int(strategy.num_replicas_in_sync), **tf_runtime.versions(),
                                     timeline=times))
    scratch_dir = call.scratch()
    tf_runtime.keep_own_writes(scratch_dir)
    workdir = WorkingDir(os.path.join(scratch_dir, "work"))
    ctx = TrainContext(
        cfg=cfg, strategy=strategy, role=spec.role, index=spec.index, rank=spec.rank, is_chief=run.is_chief,
        num_workers=run.num_workers, attempt=run.attempt, run_dir=run_dir, emit=call.emit,
        resume_from=None if evaluator else run.resume_from, scratch_dir=scratch_dir,
        wait_stop=lambda timeout: ray.get(run.bus.wait_stop.remote(timeout)), bus=run.bus,
        max_workers=run.max_workers, datasets=run.datasets,
    )
    if not evaluator:
        from raytf._task import timing

        ctx.split = timing.split(timing.measured(cfg))
    from raytf._task import rss
    from raytf._task.gpu import GpuSampler

    ctx.sources.append(rss.sample)  # (what failure.max_task_rss_gb watches)
    gpus = GpuSampler.for_task(os.environ.get("CUDA_VISIBLE_DEVICES"))  # None without GPUs, silently
    if gpus is not None:
        ctx.sources.append(gpus.sample)
    call.on_sigterm(lambda: call.emit(ev.PREEMPTED, {"step": ctx.step}))
    stopped = False
    try:
        with workdir:
            fn(ctx)
    except TrainingStopped:
        stopped = True
    finally:
        upload_outputs(run_dir, ctx.log_dir, task_log_dir(spec.role, spec.index, run.attempt), "ctx.log_dir")
        upload_outputs(run_dir, workdir.path, task_workdir(spec.role, spec.index),
                       "the training function's working directory")
    try:
        ctx.finish(completed=not stopped)  # uploads land before the task reports success
    finally:
        ctx.close()
        if gpus is not None:
            gpus.close()
    return call.succeeded(stopped=stopped, epoch=ctx.epoch, step=ctx.step)
