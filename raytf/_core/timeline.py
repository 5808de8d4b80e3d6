"""A launch's timeline (raytf issue 38): the wall-clock time of each phase boundary, from the driver's process start
to the run's record written, kept in result.json's `timeline` as seconds since that process started. It tells where
a cold command's seconds go beyond those of the same program launched by hand.

Pure: the marks are given (time.time() values, the tasks' own from their STARTED events); reading this process's
start time from /proc is the caller's (`process_start` parses what it read)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from raytf._core.events import Started

# The phase boundaries, in the order a launch passes them. Each is when that phase ENDED (seconds since the process
# started); a boundary a launch does not pass (no Ray started by it, a script's tasks) is absent.
PROCESS_START = "process_start"  # the driver's process was created (the OS' start time of it)
IMPORTS_DONE = "imports_done"  # the CLI's main() began: Python started, raytf's CLI module imported
CONFIG_CHECKED = "config_checked"  # the config loaded and checked (the CLI; before Ray)
DRIVER_IMPORTED = "driver_imported"  # the driver's modules imported (Ray's among them)
RAY_READY = "ray_ready"  # Ray started (embedded) or joined
DRIVER_READY = "driver_ready"  # the driver made (raytf.fit's imports done, the run directory checked)
CODE_CHECKED = "code_checked"  # how the tasks get the program decided and checked; its datasets made
PLACEMENT_READY = "placement_ready"  # the first attempt's placement group reserved
ACTORS_STARTED = "actors_started"  # its task actors (and the event bus) created
TASKS_ADDRESSED = "tasks_addressed"  # every task answered with its address (its process up, its port held)
TASKS_LAUNCHED = "tasks_launched"  # every task's training call sent
TASK_TF_IMPORT_START = "task_tf_import_start"  # the last task to begin importing TensorFlow began
TASK_TF_IMPORTED = "task_tf_imported"  # the last task to have TensorFlow imported had it
TASK_STRATEGY_READY = "task_strategy_ready"  # the last task to build its strategy built it
FIRST_STEP = "first_step"  # the first step (or epoch) event's time
LAST_STEP = "last_step"  # the last step (or epoch) event's time
TRAINING_END_SEEN = "training_end_seen"  # the driver saw the attempt end (every primary task returned)
TEARDOWN_DONE = "teardown_done"  # the attempt's actors killed, its placement group released
CURVES_WRITTEN = "curves_written"  # learning_curves.png written (the sinks closed before it)
METRICS_WRITTEN = "metrics_written"  # metrics.parquet written
RESULT_WRITTEN = "result_written"  # result.json's last write began (this timeline is in it: it cannot say its end)

PHASES = (PROCESS_START, IMPORTS_DONE, CONFIG_CHECKED, DRIVER_IMPORTED, RAY_READY, DRIVER_READY, CODE_CHECKED,
          PLACEMENT_READY, ACTORS_STARTED, TASKS_ADDRESSED, TASKS_LAUNCHED, TASK_TF_IMPORT_START, TASK_TF_IMPORTED,
          TASK_STRATEGY_READY, FIRST_STEP, LAST_STEP, TRAINING_END_SEEN, TEARDOWN_DONE, CURVES_WRITTEN,
          METRICS_WRITTEN, RESULT_WRITTEN)
# What a task's STARTED event may carry (its payload's "timeline": wall-clock times), and the phase each makes: the
# latest over the tasks (the slowest task gates the first step).
TASK_MARKS = {"tf_import_start": TASK_TF_IMPORT_START, "tf_imported": TASK_TF_IMPORTED,
              "strategy_ready": TASK_STRATEGY_READY}


@dataclass
class Timeline:
    """One launch's phase boundaries (wall clock). `mark` keeps the first time a boundary is passed (a retry's second
    placement says nothing of the cold start); `latest` keeps the last (the tasks', the last step's)."""

    origin: float  # the process's start (wall clock): the timeline's zero
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, phase: str, at: float) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}")
        self.marks.setdefault(phase, at)

    def latest(self, phase: str, at: float) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}")
        self.marks[phase] = max(at, self.marks.get(phase, at))

    def task_started(self, payload: Started) -> None:
        """A task's STARTED event: its TensorFlow import and strategy times, when it sent them."""
        times = payload.timeline
        if not isinstance(times, Mapping):
            return
        for key, phase in TASK_MARKS.items():
            at = times.get(key)
            if isinstance(at, int | float):
                self.latest(phase, float(at))

    def seconds(self) -> dict[str, float]:
        """Phase -> seconds since the process started, in PHASES' order (result.json's `timeline.phases`)."""
        out = {PROCESS_START: 0.0}
        for phase in PHASES[1:]:
            if phase in self.marks:
                out[phase] = round(self.marks[phase] - self.origin, 3)
        return out

    def to_json(self) -> dict[str, object]:
        return {"process_started_at": self.origin, "phases": self.seconds()}


def process_start(stat: str, boot_time: float, clock_ticks: int) -> float:
    """The wall-clock start of a process from its /proc/<pid>/stat line (field 22: clock ticks after boot), the
    machine's boot time (wall clock) and the clock's ticks per second. The boot time is best time.time() minus
    CLOCK_BOOTTIME's reading: /proc/stat's btime is whole seconds, and was 0.7 s off the wall clock here. The
    command name (field 2, in parentheses) may hold spaces and parentheses: fields are counted after its last ')'."""
    rest = stat[stat.rindex(")") + 2:].split()
    return boot_time + int(rest[19]) / clock_ticks
