"""The failure policy: given what failed and the run's history, retry or give up. Pure."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raytf.config import FailureConfig

# Failure kinds (WorkerError.kind).
USER = "user"  # the training function raised
SYSTEM = "system"  # the task's actor, process or node died
PEER = "peer"  # TF reported a lost peer (UnavailableError & co.): a symptom of another task's failure
HANG = "hang"  # no progress for failure.hang_timeout_s
STARTUP = "startup"  # tasks did not start, or TF servers did not come up
PREEMPTED = "preempted"  # a task got notice (SIGTERM) and everyone saved first: failure.max_preemptions bounds it
# Ray drains a node that holds a task (a spot node's preemption notice, with a deadline): everyone saved first and
# the group moved off it. A preemption announced to the cluster rather than to the process: the same budget.
DRAIN = "drain"
# Elastic training: the group stopped to restart at another size (capacity came back: a grow). Not a failure:
# retried without counting against failure.max_failures; cluster.elastic.max_resizes bounds it instead.
RESIZE = "resize"
# A task's memory grew past failure.max_task_rss_gb (TensorFlow's own leak, tensorflow#42616): everyone saved at an
# agreed step and the group restarted in fresh processes. Not a failure: counted apart (budget.recycles).
RECYCLE = "recycle"
HEAD_LOST = "head_lost"  # the Ray head (its GCS) stopped answering: the cluster is gone, nothing to retry on
# The configuration does not fit where the tasks landed (every port of cluster.port_range taken on a host). Never
# retried: the next attempt's tasks go to the same hosts and meet the same ports (a "startup" failure would be
# retried, and with failure.max_failures=-1 for ever); the error names the setting to change.
CONFIG = "config"
# Storage refused every checkpoint for storage.unwritable_timeout_s (_task/upload.StorageUnwritable): the run ends.
# A retry would commit nothing either; the error names the path and the last checkpoint committed.
STORAGE = "storage"
# raytf's own driver raised while an attempt ran (a Ray call it made failed, a bug): retried within
# failure.max_failures like a lost task, with its traceback in result.json (Ray Train's controller retries its own
# errors the same way), never the end of a run without a retry.
DRIVER = "driver"

# Errors a retry cannot fix: the code itself is wrong.
DETERMINISTIC = frozenset({"ImportError", "ModuleNotFoundError", "SyntaxError", "NameError", "AttributeError",
                           "IndentationError", "TypeError", "ClusterNotUsed", "TooManyMetrics"})

# TF's errors on the surviving tasks when another task dies or stalls.
PEER_ERRORS = frozenset({"UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError"})

# Exceptions in the user's code that a retry can fix: a lost peer, a network or storage hiccup. Any other (KeyError,
# ValueError, a script's sys.exit(3)) would happen again: it fails the run unless failure.retry_user_errors.
TRANSIENT = PEER_ERRORS | frozenset({"StorageError", "OSError", "IOError", "ConnectionError", "ConnectionResetError",
                                     "ConnectionRefusedError", "ConnectionAbortedError", "BrokenPipeError",
                                     "TimeoutError"})

# How informative a failure is about the root cause, when several tasks fail together.
_CAUSE_RANK = {RESIZE: 0, PREEMPTED: 0, DRAIN: 0, RECYCLE: 0, CONFIG: 1, STORAGE: 1, SYSTEM: 2, DRIVER: 2, HANG: 3,
               USER: 4, STARTUP: 5, PEER: 6}


class Decision(str, enum.Enum):
    RETRY = "retry"
    RAISE = "raise"


@dataclass(frozen=True)
class Verdict:
    decision: Decision
    reason: str


def _what_failed(error_type: str, script: bool) -> str:
    if not script:
        return "the training function failed"
    if error_type.startswith("exit "):
        return f"the script exited {error_type.removeprefix('exit ')}"
    return f"the script raised {error_type}" if error_type else "the script failed"


def decide(*, kind: str, error_type: str, attempt: int, progressed: bool, failures_so_far: int,
           cfg: FailureConfig, trained: bool = False, script: bool = False, preemptions_so_far: int = 0) -> Verdict:
    """Retry the whole group from the latest committed checkpoint, or fail the run.

    Args:
        kind: the failure kind (USER, SYSTEM, PEER, HANG, STARTUP, CONFIG, STORAGE, DRIVER, PREEMPTED, DRAIN,
            RESIZE, RECYCLE).
        error_type: the exception's class name ("" for deaths and hangs; "exit N" for a script's plain exit).
        attempt: the attempt that failed, from 1.
        progressed: whether any task completed a training step in that attempt.
        failures_so_far: failures already retried in this launch.
        preemptions_so_far: preemptions already retried in this launch (failure.max_preemptions).
        cfg: failure.* settings.
        trained: the attempt had finished its last epoch (the program's code after training failed).
        script: the program is a script (train.script / train.module), for the wording.
    """
    if kind == RESIZE:
        return Verdict(Decision.RETRY, "a resize (does not count against failure.max_failures)")
    if kind == RECYCLE:
        return Verdict(Decision.RETRY, "a recycle into fresh processes (does not count against "
                                       "failure.max_failures)")
    if kind in (PREEMPTED, DRAIN):
        # Like Ray Train's separate preemption budget: notice was given and the state saved, nothing is lost.
        if cfg.max_preemptions != -1 and preemptions_so_far >= cfg.max_preemptions:
            return Verdict(Decision.RAISE, f"failure.max_preemptions ({cfg.max_preemptions}) reached")
        what = "preemption" if kind == PREEMPTED else "a node's drain"
        return Verdict(Decision.RETRY, f"{what} (does not count against failure.max_failures)")
    if kind == CONFIG:
        return Verdict(Decision.RAISE, "a configuration error (the run's settings or input, or how they fit the hosts "
                                       "the tasks were placed on): a retry would fail the same way; change what the "
                                       "error names")
    if kind == STORAGE:
        return Verdict(Decision.RAISE, "storage refused every checkpoint for storage.unwritable_timeout_s: a retry "
                                       "would commit nothing either; fix the storage, then relaunch")
    if trained:
        return Verdict(Decision.RAISE, "training had finished its last epoch: a retry would train it all again; "
                                       "the checkpoints committed stay, a relaunch resumes from the last")
    if kind == USER:
        what = _what_failed(error_type, script)
        if error_type in DETERMINISTIC:
            return Verdict(Decision.RAISE, f"{error_type} is a bug in the code, not worth a retry")
        if attempt == 1 and not progressed and not script:
            return Verdict(Decision.RAISE, f"{what} before its first step: a retry would too")
        if attempt == 1 and not progressed and error_type not in TRANSIENT and not cfg.retry_user_errors:
            # A script's steps are raytf's to see only through Model.fit or raytf.report (orbit, the Model Garden
            # and custom loops report none): it may have trained, so never "before its first step" (issue 55).
            return Verdict(Decision.RAISE, f"{what} and raytf saw no step of it (it counts Model.fit's and "
                                           "raytf.report's): an error that is not transient (a lost peer, a network "
                                           "or storage error) would happen again (failure.retry_user_errors=true "
                                           "retries it anyway)")
        if error_type not in TRANSIENT and not cfg.retry_user_errors:
            return Verdict(Decision.RAISE, f"{what}: {error_type or 'that'} is not a transient error (a lost peer, "
                                           "a network or storage error), so a retry would fail the same way "
                                           "(failure.retry_user_errors=true retries it anyway)")
    if cfg.max_failures != -1 and failures_so_far >= cfg.max_failures:
        return Verdict(Decision.RAISE, f"failure.max_failures ({cfg.max_failures}) reached")
    return Verdict(Decision.RETRY, f"{kind} failure; retry {failures_so_far + 1} of "
                                   f"{'unlimited' if cfg.max_failures == -1 else cfg.max_failures}")


def root_cause(kinds: list[str]) -> int:
    """Index of the most informative of several simultaneous failures (a death explains a peer error)."""
    return min(range(len(kinds)), key=lambda i: _CAUSE_RANK.get(kinds[i], 9))


def stale_ranks(last_progress: dict[int, float], now: float, timeout_s: float) -> list[int]:
    """Ranks with no progress for longer than timeout_s (last_progress holds each watched rank's deadline
    base: its last heartbeat, or the attempt's start plus the start-up allowance before its first one)."""
    return sorted(r for r, t in last_progress.items() if now - t > timeout_s)


def busy_allowance_s(nbytes: int, hang_timeout_s: float, min_mib_s: float) -> float:
    """How long a rank may be busy moving `nbytes` (an upload, an export) before it counts as hung: the hang
    timeout, plus the time the bytes take at storage.min_upload_mib_s."""
    return hang_timeout_s + nbytes / (min_mib_s * 1024 * 1024)


# TF's coordination service, on the tasks still up when another stops heartbeating (a lost host, ~9 s):
#   "The following tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1"
_UNHEALTHY = "stopped sending heartbeats"
# And when the lost host is the service's own (its leader: the chief, else worker 0), the others' heartbeats to
# it time out: "DEADLINE_EXCEEDED: ... RPC: /tensorflow.CoordinationService/Heartbeat".
# (A refused connection, UNAVAILABLE, is a live host whose process died: its outcome says so.)
_LEADER_LOST = re.compile(r"(?s)(DEADLINE_EXCEEDED|Deadline Exceeded).*CoordinationService/Heartbeat")
_TF_TASK_LINE = re.compile(r"^/job:(\w+)/replica:\d+/task:(\d+)$")


def unreachable_nodes(reports: list[str], nodes: dict[tuple[str, int], str], answered: set[str]) -> set[str]:
    """The nodes a failed attempt should not be placed on again while Ray still counts them alive: those of the
    tasks TF reported as no longer heartbeating, or of the coordination service's leader when heartbeats to it
    timed out (`reports`: the errors' texts; `nodes`: (role, index) -> node id), except nodes from which some
    task's outcome did arrive (`answered`: that node is reachable; its task died of something else, a killed
    process say)."""
    named = set()
    for text in reports:
        at = text.find(_UNHEALTHY)
        if at >= 0:  # the task names on the lines right after it (not a later "remote target /job:..." trailer)
            for line in text[at:].splitlines()[1:]:
                m = _TF_TASK_LINE.match(line.strip())
                if m is None:
                    break
                named.add((m.group(1), int(m.group(2))))
        if _LEADER_LOST.search(text):
            named.add(("chief", 0) if ("chief", 0) in nodes else ("worker", 0))
    return {nodes[t] for t in named if t in nodes} - answered


_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))(?::|$)")


# raytf's own exceptions that are configuration errors, by name (a script's child reports only the name):
# raytf.dataset(name) for a dataset the run was not given (_core/data.DatasetNotGiven), raytf.data_service(ds) for a
# pipeline the tf.data service cannot run (_core/dataservice.Unservable); a TensorFlow or tf-keras without a private
# symbol correctness needs (_core/private_apis.PrivateApiMissing: refused at start); Keras 3's Model.fit on a cluster
# (_task/keras3.Keras3Unsupported).
CONFIG_ERRORS = frozenset({"DatasetNotGiven", "Unservable", "PrivateApiMissing", "Keras3Unsupported"})


def exit_failure(returncode: int, stderr_tail: list[str], raised: str | None = None) -> tuple[str, str]:
    """(kind, error_type) of a script that exited non-zero: a signal is a death ("system"); otherwise the
    exception it died of decides (`raised`, as the child reported it, else the last one named in its
    stderr; a lost peer's UnavailableError & co. are "peer"), and an exit without one (sys.exit(3)) is a
    "user" failure of type "exit <code>"."""
    if returncode < 0:
        return SYSTEM, ""
    if raised in CONFIG_ERRORS:
        return CONFIG, raised
    if raised and raised != "SystemExit":
        return (PEER if raised in PEER_ERRORS else USER), raised
    for line in reversed(stderr_tail):
        m = _EXC_LINE.match(line.strip())
        if m:
            name = m.group(1)
            return (PEER if name in PEER_ERRORS else USER), name
    return USER, f"exit {returncode}"


# Errors whose message does not say what to change, and what to change (matched in the error's text).
_HINTS = (
    ("Collective ops must be configured at program startup",
     "the program used TensorFlow (a tf.config call, a tensor, a dataset, a model) before it built "
     "tf.distribute.MultiWorkerMirroredStrategy(): build the strategy first, right after the imports (TF sets its "
     "collective ops up then, once)"),
    # A Conv2D given an empty batch (a MultiWorkerMirroredStrategy worker whose share of an epoch ran out first steps
    # on with zero-size stand-ins: the tf.data service's distributed_epoch, unequal shards) returns it unchanged
    # under TF's oneDNN CPU kernels (TF 2.21: tf.nn.conv2d(zeros([0, 28, 28, 3]), ...) is (0, 28, 28, 3)); the next
    # layer then fails. Graph mode (Keras fit), eager mode.
    *((marker, "a worker trained a step on an empty batch (its share of the epoch ran out before its peers', as "
               "the tf.data service's distributed_epoch shares it), and TF's oneDNN Conv2D on CPU mishandles an "
               "empty batch (it returns its input). Fix: make every step full, with ds.repeat() before "
               "ctx.data_service(ds) and train.steps_per_epoch; or turn oneDNN off: "
               "ray.runtime_env.env_vars.TF_ENABLE_ONEDNN_OPTS=0")
      for marker in ("Matrix size-incompatible: In[0]: [0,", "Must provide as many biases as the last dimension of "
                                                               "the input tensor: ")),
    # A collective's tensors differ between the ranks ("Collective instance 182 expected type 1 and data_type 1 but
    # got type 1 and data_type 9"), right after a resume: the ranks restored different states. The Model Garden's
    # trainer (orbit) gives a non-chief's CheckpointManager a temporary directory, so only the chief restores (raytf
    # issue 55; its own relaunch fails the same way).
    (" and data_type ",
     "the ranks are not running the same model state: a collective op got different tensors from them, as when one "
     "rank restored a checkpoint and another started fresh. Fix: every rank must restore the same checkpoint: a "
     "non-chief's checkpoint directory must survive too (give every rank {checkpoint_dir}, not a temporary "
     "directory)"),
)


def hint(text: str) -> str | None:
    """What to change for a known error whose own message does not say it, if `text` (an error message, a
    traceback, the last lines of a script's stderr) holds one."""
    for marker, advice in _HINTS:
        if marker in text:
            return advice
    return None


class Contact(str, enum.Enum):
    """The driver's contact with the Ray head (its GCS), from periodic probes."""

    UP = "up"
    SILENT = "silent"  # probes fail, not for long enough to call it lost
    LOST = "lost"  # final: the driver ends the run


@dataclass
class HeadContact:
    """LOST once every probe has failed for `lost_after_s`; any answer before that is UP again."""

    lost_after_s: float
    state: Contact = Contact.UP
    silent_since: float | None = None

    def observe(self, answered: bool, now: float) -> Contact:
        if self.state is Contact.LOST:
            return self.state
        if answered:
            self.state, self.silent_since = Contact.UP, None
            return self.state
        if self.silent_since is None:
            self.silent_since = now
        self.state = Contact.LOST if now - self.silent_since >= self.lost_after_s else Contact.SILENT
        return self.state


# Ray ends a process (driver included) whose GCS has not answered for this long: "Failed to connect to GCS
# within 60 seconds ... The program will terminate" (RayConfig gcs_rpc_server_reconnect_timeout_s).
RAY_GCS_TIMEOUT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"


def head_lost_after(environ: Mapping[str, str]) -> float:
    """How long the head may stay silent before the driver gives the run up: half of Ray's own limit, so the
    driver records the run and says why before Ray ends the process without a word (a head that restarts
    within that, with GCS fault tolerance, is not lost)."""
    try:
        ray_limit = float(environ.get(RAY_GCS_TIMEOUT_ENV, "60"))
    except ValueError:
        ray_limit = 60.0
    return max(5.0, ray_limit / 2)
