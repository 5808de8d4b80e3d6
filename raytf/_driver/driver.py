"""The Ray driver: one launch of a run, the thin impure shell around the run's state machine (_core.run_machine.Run):
it checks the run directory, starts the services a run has (the record, the event sinks, Ray, its datasets, the
head watch), carries out each state (an attempt: _driver.attempt_runner; a retry's checkpoint: verified here) and
records the end (_driver.record).

Imports Ray, never TensorFlow.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray

from raytf import _storage as storage
from raytf._core import events as ev
from raytf._core import failure
from raytf._core import timeline as tl
from raytf._core.attempt_record import FAILED, INTERRUPTED, RUNNING, SUCCEEDED, Done
from raytf._core.checkpoints import CheckpointEntry
from raytf._core.run_machine import Run
from raytf._core.run_states import Ended, Placing, Retrying, Training
from raytf._driver import preflight, usercode
from raytf._driver.attempt_runner import AttemptRunner, driver_error
from raytf._driver.data import Datasets
from raytf._driver.dataservice import DataService
from raytf._driver.headwatch import HeadWatch
from raytf._driver.preflight import Launch
from raytf._driver.raymetrics import RayMetrics
from raytf._driver.record import Outcome, RunRecord
from raytf._driver.sinks import Progress, Sinks, TensorBoardSink
from raytf._s3 import plain_http_endpoint
from raytf.config import Config, ignored_by_scripts, owns_loop, redacted, secret_runtime_env, to_yaml
from raytf.errors import RaytfError

log = logging.getLogger("raytf")


class Driver:
    """Runs one launch of a run (`launch`: checked and its run directory read before Ray, _driver/preflight.py):
    attempts until one succeeds or the run's state machine says stop. `refill_at_end`: the run's end asks for
    standby processes for the session's next run (a notebook's, a sweep's next trial; not a CLI command's, whose
    session is its one run)."""

    poll_s = 0.5

    def __init__(self, launch: Launch, *, quiet: bool = False, on_event: Callable[[ev.Event], None] | None = None,
                 datasets: Mapping[str, Any] | None = None, refill_at_end: bool = True) -> None:
        self.launch = launch
        self.cfg, self.functions, self.run_dir, self.plan = launch.cfg, launch.functions, launch.run_dir, launch.plan
        self.quiet, self.on_event, self.refill_at_end = quiet, on_event, refill_at_end
        self._given_datasets = datasets  # raytf.fit's datasets=; checked once Ray is up (see run)
        self.t0 = launch.t0
        self.resume, self.tracking, self.timeline = launch.resume, launch.tracking, launch.timeline
        self.timeline.mark(tl.DRIVER_READY, time.time())

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> Outcome:
        try:
            return self._run(self.launch.connect())  # (the CLI connected already; a notebook's fit connects here)
        finally:
            self.launch.release()  # (its claim on the run directory: preflight.prepare)

    def _run(self, embedded: bool) -> Outcome:
        cfg, launch = self.cfg, self.launch
        previous, table = launch.previous, launch.table
        self._warn(cfg)
        self.run_dir.write_text(storage.CONFIG_FILE, to_yaml(redacted(cfg)))
        run = self.machine = Run(cfg, previous=attempts_before(previous, table))
        self.record = record = RunRecord(cfg, self.run_dir, run, self.plan, previous=previous, table=table,
                                         t0=self.t0, tracking=self.tracking, timeline=self.timeline)
        # A script's epochs, steps and batch size are its own: its first Model.fit tells the first two (a Ray Train
        # loop's too: its reports count its epochs).
        script = owns_loop(cfg)
        progress = Progress(epochs=None if script else cfg.train.epochs,
                            steps_per_epoch=None if script else cfg.train.steps_per_epoch,
                            batch_size=None if script else cfg.train.batch_size, quiet=self.quiet)
        ray_metrics = RayMetrics(cfg.run.name, enabled=cfg.metrics.ray_metrics)
        record.tensorboard = TensorBoardSink(self.run_dir)  # (closed within a deadline, too, when the head is lost)
        self.sinks = sinks = Sinks(progress, record.tensorboard, ray_metrics)
        if self.on_event is not None:
            sinks.add(lambda e: self.on_event(e))
        try:  # how the tasks get the program; Ray Data input: made (train.datasets' function needs Ray) and checked
            code = usercode.plan(cfg, embedded=embedded)  # before anything is reserved
            if cfg.train.script:  # as the tasks take it (from their own copy of a working_dir, say)
                cfg.train.script = code.script
            data = Datasets.of_run(cfg, self._given_datasets, launch.python_path)
            if data is not None:
                data.check(cfg, record.plan, embedded=embedded)
            if cfg.data_service.workers:  # the tf.data service: its servers per attempt, in a group of their own
                DataService.check(cfg, record.plan, embedded=embedded)
                record.service = DataService(cfg, self.run_dir, embedded=embedded)
                sinks.add(record.service.observe)
            self.timeline.mark(tl.CODE_CHECKED, time.time())
        except BaseException:
            sinks.close()
            raise
        self.runner = AttemptRunner(launch, run, record, sinks=sinks, progress=progress, ray_metrics=ray_metrics,
                                    dispatch=self._dispatch, data=data, code=code, service=record.service,
                                    poll_s=self.poll_s,  # (a CLI command's session is its one run)
                                    one_run=not self.refill_at_end)
        self.tracking.start(self.run_dir, started_at=self.t0)
        record.write_result(RUNNING)
        head_watch = None if embedded else self._watch_head()
        ended_by: BaseException | None = None
        status = FAILED
        try:
            status = self._attempts(run, launch.resumed_from).status
        except KeyboardInterrupt as e:
            ended_by, status = e, INTERRUPTED
            if not isinstance(run.state, Ended):
                run.interrupted(time.time())
            raise
        except RaytfError as e:  # placement and storage errors: recorded, then raised to the caller
            ended_by = e
            run.aborted(e, time.time())
            raise
        except BaseException as e:
            ended_by = e
            run.broke(e, time.time())  # (no attempt is left "running" in result.json)
            raise
        finally:
            if head_watch is not None:
                head_watch.stop()
            if self.refill_at_end and self.runner.group is not None:
                self.runner.group.refill()  # for the session's next run (a notebook's, a sweep's next trial)
            record.end(status, ended_by, closing=sinks.closing())
        return record.outcome(status)

    def _attempts(self, run: Run, resumed_from: CheckpointEntry | None) -> Ended:
        """Carry out the run's states until it ends: the only place the run's state machine is advanced from (but
        for the head watch's verdict, `_head_lost`)."""
        state = run.begin(resumed_from)
        placement = None
        while True:
            if isinstance(state, Placing):
                placement = self.runner.place(state)  # (a PlacementError ends the run: aborted)
                state = run.placed(placement.size, time.time())
            elif isinstance(state, Training):
                end = None
                try:
                    try:
                        end = self.runner.train(state.attempt, placement)
                    except (RaytfError, KeyboardInterrupt):  # storage gave up, Ctrl-C: as the run's end
                        raise
                    except Exception as e:  # raytf's own code: the attempt's failure, for the policy to decide
                        log.exception("attempt %d: raytf's driver failed", state.attempt.number)
                        end = driver_error(e)
                    if isinstance(end.end, Done):
                        run.trained()  # only the teardown is left: a head lost during it does not undo that
                finally:
                    end = self.runner.teardown(end)
                # (With checkpoint.resume=false the run directory had no checkpoints: any here are this launch's.)
                latest = None if isinstance(end.end, Done) else self.run_dir.checkpoints.latest()
                try:
                    state = run.ended(end, latest=latest, now=time.time())
                finally:
                    self.tracking.attempt_ended(run.attempt.to_json())
            elif isinstance(state, Retrying):
                state = run.resumed(self.resume.trusted())
                # The attempt's last rows as one more part: a retry costs what it adds, not a read and a write of
                # the whole table (a days-long run's, from storage once past MetricsTable's bound; issue 33).
                self.record.flush_metrics(force=True)
                self.record.note_running()
            elif state.status == INTERRUPTED:
                raise KeyboardInterrupt  # the user's, after the final save: the caller sees it
            else:
                return state

    def _dispatch(self, events: list[ev.Event]) -> None:
        for e in events:
            self.record.observe(e)
            self.sinks(e)
        self.tracking.on_events(events)

    @staticmethod
    def _warn(cfg: Config) -> None:
        if (endpoint := plain_http_endpoint(cfg.storage)) is not None:
            log.warning("storage: plain HTTP to %s, not this machine: checkpoints and signed requests cross the "
                        "network unencrypted. Fix: storage.scheme=https (or keep that endpoint on loopback)", endpoint)
        if public := secret_runtime_env(cfg.ray.runtime_env):  # names only, never values
            log.warning("ray.runtime_env: %s look like secrets: runtime_env values are readable by anyone who can "
                        "reach the cluster (Ray's state API) and are written to Ray's logs. Fix: set them in the "
                        "nodes' environment or in files on the nodes instead", ", ".join(public))
        if ignored := ignored_by_scripts(cfg):
            log.warning("train.script: %s have no effect on a script (it builds its own strategy, loop and "
                        "checkpoints); set them in the script or its train.args", ", ".join(ignored))

    def _watch_head(self) -> HeadWatch | None:
        try:
            address = ray.get_runtime_context().gcs_address
        except Exception:  # a Ray Client connection (ray://): the client server's address is the head's
            address = preflight.resolve_address(self.cfg)
        if not address or ":" not in address:
            return None
        self.record.head = address
        return HeadWatch(address, self._head_lost, lost_after_s=failure.head_lost_after(os.environ)).start()

    def _head_lost(self, why: str) -> None:
        """The head watch's verdict, from its thread (the main thread may be blocked on the lost cluster for good):
        the run ends on it through its state machine (a verdict the main thread reached first stands), then the
        record writes what it can and this process exits (record.record_head_lost)."""
        run = self.machine
        attempt = run.attempt
        done = attempt is not None and attempt.status == SUCCEEDED
        message = self.record.head_lost_message(why, done)
        self.record.record_head_lost(run.head_lost(message, time.time()), message)


def attempts_before(previous: Mapping[str, Any], table) -> int:
    """How many attempts earlier launches of the run made: their result.json's, or more where their metrics say so
    (a launch whose driver was killed recorded none of its attempts; its rows carry their numbers: raytf issue 71,
    a relaunch's rows said `attempt 1` again)."""
    recorded = len(previous.get("attempts") or [])
    if table is None or "attempt" not in table.column_names or table.num_rows == 0:
        return recorded
    import pyarrow.compute as pc

    return max(recorded, int(pc.max(table["attempt"]).as_py() or 0))


def run(launch: Launch, *, quiet: bool = False, on_event: Callable[[ev.Event], None] | None = None,
        datasets: Mapping[str, Any] | None = None, refill_at_end: bool = True) -> Outcome:
    """Run a prepared launch (_driver/preflight.py: `prepare`) to completion; failures come back as status "failed"
    with `error` set. `on_event` is called in the driver with every event the tasks send (metrics, checkpoints,
    ...); `datasets`: {name: ray.data.Dataset} each worker reads its share of (ctx.dataset); `refill_at_end`: see
    Driver."""
    return Driver(launch, quiet=quiet, on_event=on_event, datasets=datasets, refill_at_end=refill_at_end).run()
