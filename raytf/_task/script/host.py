"""Script mode, the host side: inside a task's actor, run the user's unmodified program as a child process
(`raytf._task.script.child`) and relay what it does.

- its stdout/stderr (through `tee.TaskOutput`, as a training function's): all of it into the task's log file, the
  lines shown (`lines.Shown`: train.stream_output, train.show_tf_logs) to the driver as OUTPUT events; the last
  stderr lines are kept for the error message;
- its metrics rows and heartbeats (JSON lines on a pipe) as events on the bus, plus heartbeats while it
  prints, so a script that only logs is not taken for a hung one;
- the scalars it writes with `tf.summary` under $RAYTF_CHECKPOINT_DIR and $RAYTF_LOG_DIR, as its metrics rows, as
  long as it reports none itself (no Keras `fit`, no `raytf.report`: orbit, the Model Garden, a custom loop);
- its checkpoint snapshots (chief) uploaded to <run>/checkpoints/ like a training function's;
- on resume, the latest committed checkpoint downloaded into its $RAYTF_CHECKPOINT_DIR first;
- its task's Ray Data shares (raytf.fit's datasets=), served to `raytf.dataset` in the script by a `feed.DataFeed` on
  a Unix socket in the scratch directory ($RAYTF_DATA_SOCKET) while it runs;
- whatever it wrote under $RAYTF_LOG_DIR (TensorBoard logs, say) uploaded to <run>/logs/<role><index>-attempt<N>/
  when it ends, and whatever it wrote in its working directory (a directory of its own: tasks on one host would
  otherwise write the same relative paths) to <run>/workdir/<role><index>/.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from typing import Any

from raytf._core import events as ev
from raytf._core import failure, limits, tracebacks
from raytf._core.plan import TaskSpec
from raytf._core.tasks import TaskRun
from raytf._storage import RunDir, task_log, task_log_dir, task_workdir
from raytf._task import timing, usercode
from raytf._task.lines import Shown
from raytf._task.script import feed, protocol, spanning, spawn, summaries
from raytf._task.script.env import child_env, expand_args
from raytf._task.tee import CHUNK, TaskOutput
from raytf._task.upload import Uploader, upload_outputs
from raytf.config import Config
from raytf.errors import StorageError, WorkerError

log = logging.getLogger(__name__)

_READER_GRACE_S = 10.0  # after the script's group is gone, how long its pipes may take to drain

class ScriptHost:
    """Runs one task's child process to its end; `run()` returns its exit code and stderr tail."""

    def __init__(self, *, cfg: Config, spec: TaskSpec, run_dir: RunDir, emit, attempt: int, is_chief: bool,
                 scratch: str, log_file, stream: bool, datasets: dict[str, Any] | None = None,
                 warm: spawn.WarmChild | None = None) -> None:
        self.cfg, self.spec, self.run_dir, self.emit = cfg, spec, run_dir, emit
        self.attempt, self.is_chief, self.scratch = attempt, is_chief, scratch
        self.checkpoint_dir = os.path.join(scratch, "checkpoints")
        self.log_dir = os.path.join(scratch, "logs")
        self.work_dir = os.path.join(scratch, "work")  # the script's current directory
        self.launch_dir = os.getcwd()  # where the task was started: relative paths in the config mean this
        self.output = TaskOutput(log_file, emit, Shown(streamed=stream, tf_logs=cfg.train.show_tf_logs))
        self._names = limits.MetricNames(cfg.metrics.max_names)  # a script writing its events pipe itself too
        self._lock = threading.Lock()
        self._last_beat = time.monotonic()
        self._position = (0, 0)  # (epochs completed, step): the events thread writes it, a SIGTERM's thread reads it
        self._resumed_from: str | None = None  # the checkpoint restored (restore): the last committed, until a commit
        self._uploader: Uploader | None = None
        self._done = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.error: BaseException | None = None  # a failed checkpoint upload, raised by run()
        self.raised: str | None = None  # the type of the uncaught exception the script died of
        self.raised_summary = ""  # and that exception in a few lines (_core/tracebacks.summary)
        self.span: spanning.SpanWatch | None = None  # its strategy against its cluster (run() makes it)
        # Ray Data input: {name: ray.data.DataIterator}, served to the script while it runs (child_env's data_socket).
        self.datasets = dict(datasets or {})
        self.data_socket = feed.socket_path(scratch) if self.datasets else ""
        self.warm = warm  # a child that has imported TensorFlow already, to run the script in (spawn.WarmChild)
        # Its tf.summary scalars, its rows while it reports none itself.
        self._summaries = summaries.SummaryRelay([self.checkpoint_dir, self.log_dir], self._names, self._summary_row)

    def restore(self, resume_from) -> None:
        """Every task starts from the latest committed checkpoint's files in its $RAYTF_CHECKPOINT_DIR
        (under MWMS all workers must restore the same state)."""
        for d in (self.checkpoint_dir, self.log_dir, self.work_dir):
            os.makedirs(d, exist_ok=True)
        if resume_from is not None:
            self.run_dir.checkpoints.download(resume_from, self.checkpoint_dir, marker=False)
            self._position = (resume_from.epoch, resume_from.step)
            self._resumed_from = resume_from.name

    @property
    def position(self) -> tuple[int, int]:
        """(epochs completed, step) as the script last reported them."""
        with self._lock:
            return self._position

    def environment(self, run: TaskRun, base: dict[str, str] | None = None) -> dict[str, str]:
        """The child's environment for `run` (this task's call), over `base` (default: this process's)."""
        return child_env(base=dict(os.environ) if base is None else base, tf_config=run.tf_config, spec=self.spec,
                         cfg=self.cfg, run_uri=self.run_dir.uri, attempt=self.attempt, is_chief=self.is_chief,
                         num_workers=run.num_workers, max_workers=run.max_workers,
                         checkpoint_dir=self.checkpoint_dir, resume_from=run.resume_from,
                         python_path=usercode.task_paths(run.python_path), log_dir=self.log_dir,
                         launch_dir=self.launch_dir,
                         work_dir=self.work_dir, data_socket=self.data_socket, datasets=list(self.datasets))

    def run(self, env: dict[str, str]) -> tuple[int, list[str]]:
        """Run the script to its end; with datasets, their feed serves it from before it starts until it is gone."""
        if not self.datasets:
            return self._run(env)
        with feed.DataFeed(self.datasets, self.data_socket):
            return self._run(env)

    def _run(self, env: dict[str, str]) -> tuple[int, list[str]]:
        c = self.cfg
        epoch, step = self.position
        spec = protocol.ChildSpec(
            parent_pid=os.getpid(), module=c.train.module,
            script=os.path.join(self.launch_dir, c.train.script) if c.train.script else c.train.script,
            args=expand_args(list(c.train.args), {
                "checkpoint_dir": self.checkpoint_dir, "log_dir": self.log_dir, "work_dir": self.work_dir,
                "launch_dir": self.launch_dir, "rank": str(self.spec.rank), "role": self.spec.role,
                "index": str(self.spec.index), "attempt": str(self.attempt), "run_dir": self.run_dir.uri}),
            threads=c.cluster.threads or self.spec.threads, gpu_memory_growth=c.cluster.gpu_memory_growth,
            every_steps=c.metrics.every_steps, max_names=c.metrics.max_names,
            timing=timing.measured(c),  # the step-time breakdown, measured in the script's process
            heartbeat_s=c.failure.heartbeat_s, is_chief=self.is_chief, checkpoint_dir=self.checkpoint_dir,
            scratch=self.scratch, epoch=epoch, step=step)
        child = None
        if self.warm is not None:  # TensorFlow imported already (spawn.WarmChild)
            try:
                child = self.warm.hand(spec, env, self.work_dir)
            except spawn.WarmChildLost as e:  # the cold child shows why, if it is the import's fault
                log.warning("%s; starting the script in a new process", e)
        if child is None:
            child = spawn.start_cold(spec, env, self.work_dir)
        self.proc, read_fd, alive_w = child.proc, child.events_fd, child.alive_fd
        threads = [threading.Thread(target=self._read_output, args=(self.proc.stdout, "out"), daemon=True),
                   threading.Thread(target=self._read_output, args=(self.proc.stderr, "err"), daemon=True),
                   threading.Thread(target=self._read_events, args=(read_fd,), daemon=True)]
        ticker = threading.Thread(target=self.output.tick, args=(self._done, self._beat_while_printing), daemon=True,
                                  name="raytf-script-ticker")
        tf_config = json.loads(env["TF_CONFIG"]) if "TF_CONFIG" in env else None
        self.span = spanning.SpanWatch(self.cfg, self.spec, tf_config)
        watch = [threading.Thread(target=self.span.watch, args=(self._done,), daemon=True, name="raytf-peer-watch")
                 ] if self.span.has_cluster else []
        summary_watch = threading.Thread(target=self._summaries.watch, args=(self._done,), daemon=True,
                                         name="raytf-summaries")
        for t in [*threads, ticker, *watch, summary_watch]:
            t.start()
        try:
            code = spawn.wait_exit(self.proc)
        finally:
            # The script is done (or the host is being torn down): nothing it started outlives it, and
            # nothing left holding its pipes keeps the readers (and so this task) waiting.
            os.close(alive_w)  # the sentinel kills the group too; it is not left waiting either way
            self._kill_group()  # (its zombie still holds the group's id: reaped only below)
            code = spawn.wait_exit(self.proc)
            spawn.reap_later(self.proc)  # (the kernel's release can take long: spawn.wait_exit)
            deadline = time.monotonic() + _READER_GRACE_S
            for t in threads:
                t.join(max(0.0, deadline - time.monotonic()))
            self._done.set()
            ticker.join()
            summary_watch.join()
            try:  # what it wrote last (its last step's row waited for a newer one)
                self._summaries.relay(final=True)
            except Exception as e:  # (never in the way of the script's own end, told below)
                log.warning("the script's last tf.summary scalars were not relayed: %s: %s", type(e).__name__, e)
            self.output.end(ok=code == 0)
            role, index = self.spec.role, self.spec.index
            upload_outputs(self.run_dir, self.log_dir, task_log_dir(role, index, self.attempt), "$RAYTF_LOG_DIR")
            upload_outputs(self.run_dir, self.work_dir, task_workdir(role, index), "the script's working directory")
        if self._uploader is not None and self.error is None:
            try:
                self._uploader.close()  # the last snapshots land before the task reports success
            except Exception as e:
                self.error = e
        if self.error is not None:
            raise self.error
        if code == 0 and (unused := self.span.at_exit()) is not None:
            raise unused
        return code, list(self.output.stderr_tail)

    def exit_error(self, code: int, tail: list[str], node_id: str) -> WorkerError:
        """The task's error for a script that exited `code` (non-zero), the last lines of its stderr `tail`."""
        kind, error_type = failure.exit_failure(code, tail, self.raised)
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        log_uri = self.run_dir.uri_of(task_log(self.spec.role, self.spec.index, self.attempt))
        advice = failure.hint("\n".join(tail))
        # The failure, not its data (raytf issue 54): the exception the child reported, in a few lines; else the
        # last lines of its stderr without the values a message dumped (a tensor: tens of lines).
        if self.raised_summary and code > 0:
            first, *more = self.raised_summary.splitlines()
            text = f"the script {how}: {first}" + "".join(f"\n  | {line}" for line in more)
        else:
            last = "\n".join(f"  | {line}" for line in tracebacks.tail_lines(tail)) or "  | (nothing on stderr)"
            text = f"the script {how}; the last lines of its stderr:\n{last}"
        return WorkerError(f"{text}\n(all of it: {log_uri})" + (f"\nFix: {advice}" if advice else ""),
                           role=self.spec.role, rank=self.spec.rank, node_id=node_id,
                           remote_traceback="\n".join(tracebacks.tail_lines(tail)), kind=kind, error_type=error_type)

    def _kill_group(self, sig: int = signal.SIGKILL) -> None:
        spawn.kill_session(self.proc.pid, sig)  # (its session: every group in it, not only the script's own)

    # -- the script's tf.summary scalars ----------------------------------------------------------
    def _summary_row(self, step: int, metrics: dict[str, float]) -> None:
        with self._lock:
            epochs, at = self._position
            self._position = (epochs, max(at, step))
        self._last_beat = time.monotonic()
        self.emit(ev.STEP, ev.Row(epoch=epochs + 1, step=step, metrics=metrics))

    # -- the child's output ------------------------------------------------------------------
    def _read_output(self, pipe, stream: str) -> None:
        self.output.read(lambda: pipe.read1(CHUNK), stream)
        pipe.close()

    def _beat_while_printing(self) -> None:
        """Printing is a sign of life: a heartbeat at most every failure.heartbeat_s while the script prints."""
        now = time.monotonic()
        if now - self._last_beat >= self.cfg.failure.heartbeat_s and self.output.take_active():
            self._last_beat = now
            self._beat()

    # -- the child's events ------------------------------------------------------------------
    def _read_events(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as f:
            while raw := f.readline(limits.MAX_EVENT_LINE_BYTES):
                if not raw.endswith(b"\n") and len(raw) >= limits.MAX_EVENT_LINE_BYTES:
                    # Not one of ScriptReporter's (a few KiB): the rest of it is read and left, never held.
                    size = len(raw)
                    while (more := f.readline(limits.MAX_EVENT_LINE_BYTES)) and not more.endswith(b"\n"):
                        size += len(more)
                    log.warning("an event line of %d bytes from the script skipped (at most %d): %r...",
                                size + len(more), limits.MAX_EVENT_LINE_BYTES, raw[:100])
                    continue
                try:
                    obj = json.loads(raw)
                except (ValueError, RecursionError):
                    log.warning("unreadable event from the script: %r", raw[:200])
                    continue
                try:
                    msg = protocol.decode(obj)
                    if msg is not None:
                        self._on_message(msg)
                except Exception as e:  # keep draining the pipe, or the script blocks writing to it
                    self._give_up(e)

    def _give_up(self, e: Exception) -> None:
        """A checkpoint upload failed (after storage.upload_retries), or an event could not be relayed: stop
        the script now rather than let it train on with nothing saved; run() raises the error. SIGKILL, not
        SIGTERM: a script may catch SIGTERM to save a checkpoint, which could not be saved either."""
        with self._lock:
            if self.error is not None:
                return
            self.error = e
        log.error("stopping the script: %s: %s", type(e).__name__, e)
        if self.proc is not None:
            self._kill_group()

    def _on_message(self, msg: protocol.Message) -> None:
        relay = self._summaries
        relayed = isinstance(msg, protocol.Relayed)
        if isinstance(msg, protocol.FitStarted) or (relayed and msg.kind in (ev.STEP, ev.EPOCH)):
            relay.script_counts()
        elif relayed and msg.kind == ev.HEARTBEAT and not relay.counted and (
                msg.payload.step < relay.step):  # (its summaries count the steps it does not: their step, then)
            msg = protocol.Relayed(ev.HEARTBEAT, ev.Beat(epoch=msg.payload.epoch, step=relay.step))
        if (position := msg.position()) is not None:
            with self._lock:
                if not relay.counted:  # (a checkpoint's number, or nothing: its summaries' step if later)
                    position = (position[0], max(position[1], relay.step))
                self._position = position
        self._last_beat = time.monotonic()
        if isinstance(msg, protocol.Raised):
            self.raised, self.raised_summary = str(msg.type), str(msg.summary or "")
        elif isinstance(msg, protocol.FitStarted):
            self.emit(ev.STARTED, ev.Started(**dataclasses.asdict(msg)))
            if self.span is not None and (unused := self.span.at_fit(int(msg.replicas))) is not None:
                self._give_up(unused)
        elif isinstance(msg, protocol.SyncFailed):
            self._give_up(StorageError(f"the checkpoint directory ({self.checkpoint_dir}) could not be copied whole "
                                       f"for upload: {msg.reason}"))
        elif isinstance(msg, protocol.Sync):
            if self._uploader is None:
                self._uploader = Uploader(self.run_dir, self.cfg, self.emit, self._beat, None,
                                          on_error=self._give_up, resumed_from=self._resumed_from)
            try:
                self._uploader.submit(msg.path, int(msg.epoch), int(msg.step),
                                      {"attempt": self.attempt, "rank": self.spec.rank, "source": "script"})
            except BaseException:
                shutil.rmtree(msg.path, ignore_errors=True)  # not uploaded, and nobody else removes it
                raise
        else:  # a row, a heartbeat, raytf.data_service's notice: relayed as it is
            if msg.kind in (ev.STEP, ev.EPOCH):  # ScriptReporter checked them; a script writing its pipe did not
                self._names.check(msg.payload.metrics)
            self.emit(msg.kind, msg.payload)

    def _beat(self) -> None:
        epoch, step = self.position
        self.emit(ev.HEARTBEAT, ev.Beat(epoch=epoch + 1, step=step))
