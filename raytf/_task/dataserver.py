"""The tf.data service's servers, the task side: a dispatcher or a worker (TF's DispatchServer and WorkerServer) is
a task like any other (_task/actor.py: its port held first, its call a TaskCall returning a TaskOutcome). The
dispatcher's journal, which a restarted dispatcher adopts: _task/dataservice.py.

TensorFlow is imported in the server's own process, never at module level: the driver imports this module for the
actor's class.
"""

from __future__ import annotations

import os

from raytf._core import dataservice as rules
from raytf._core import failure
from raytf._core.tasks import TaskOutcome, TaskRun
from raytf._task.actor import TaskActor
from raytf._task.call import TaskCall
from raytf._task.dataservice import open_journal
from raytf.errors import WorkerError


class DataServiceServer(TaskActor):
    """One tf.data service server (TF's DispatchServer or WorkerServer), a task like any other (_task/actor.py):
    __init__ holds its port (tensorflow#21492; a replaced server holds its predecessor's again: TaskGroup.replace),
    address() says where it is, start_server(TaskRun) starts TF's server on that port (TF_GRPC_REUSE_PORT) in a
    TaskCall, serve() returns only when the run is over: its ref failing is how the driver learns the server died.
    Its role is DISPATCHER_ROLE or WORKER_ROLE; its log is `logs/<role><index>-attempt<n>.log`."""

    def __repr__(self) -> str:  # what Ray's state API and logs call the actor (its `repr_name`)
        spec = getattr(self, "spec", None)
        kind = "dispatcher" if spec is not None and spec.role == rules.DISPATCHER_ROLE else "worker"
        return f"DataServiceServer({kind} {spec.index if spec is not None else '?'})"

    def start_server(self, run: TaskRun) -> TaskOutcome:
        """Start TF's server on the held port: the dispatcher journals to a directory on this node (its
        predecessor's, when it was started again), a worker registers with the run's dispatcher
        (`run.data_service`) under the address the others reach it at."""
        with TaskCall(self, run, kind=lambda e: failure.SYSTEM, keep_output=True) as call:
            if self._no_port:
                call.failed(WorkerError(self._no_port, role=self.spec.role, rank=self.spec.rank, node_id=self.node_id,
                                        kind=failure.CONFIG))
            else:
                self._server = self._start_tf(run)
                self.release_port()
                call.succeeded()
        self._output = call.output
        return call.outcome

    def _start_tf(self, run: TaskRun):
        from raytf._task import tf_runtime

        tf_runtime.configure(self.spec.threads, False)
        import tensorflow as tf

        svc = tf.data.experimental.service
        if self.spec.role == rules.DISPATCHER_ROLE:
            self._journal = open_journal(run.run_dir.run_name, run.attempt)
            # fault_tolerant_mode: every change of its state (datasets, jobs, the split cursor) is in the journal
            # before it answers, so a dispatcher started again from it goes on where it was.
            return svc.DispatchServer(svc.DispatcherConfig(
                port=self._port, work_dir=os.path.join(self._journal.path, "journal"), fault_tolerant_mode=True))
        here = f"{self._host}:{self._port}"
        return svc.WorkerServer(svc.WorkerConfig(
            dispatcher_address=run.data_service.dispatcher, worker_address=here, port=self._port,
            # TF's default names "localhost", which only this host could reach.
            data_transfer_address=f"{self._host}:%dts_port%"))
