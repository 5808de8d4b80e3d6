"""The launch's timeline record (raytf issue 38): marks, the tasks' times, durations, the process start's parse."""

from __future__ import annotations

import pytest

from raytf._core import timeline as tl
from raytf._core.events import Started


def test_marks_become_seconds_since_the_process_start_in_phase_order():
    t = tl.Timeline(origin=100.0)
    t.mark(tl.RAY_READY, 103.5)
    t.mark(tl.IMPORTS_DONE, 101.25)
    t.mark(tl.RAY_READY, 110.0)  # a retry's: the first time counts
    assert t.seconds() == {tl.PROCESS_START: 0.0, tl.IMPORTS_DONE: 1.25, tl.RAY_READY: 3.5}
    assert list(t.seconds()) == [p for p in tl.PHASES if p in t.seconds()]
    assert t.to_json() == {"process_started_at": 100.0, "phases": t.seconds()}


def test_latest_keeps_the_last_time_and_unknown_phases_are_refused():
    t = tl.Timeline(origin=0.0)
    for at in (5.0, 7.0, 6.0):
        t.latest(tl.LAST_STEP, at)
    assert t.seconds()[tl.LAST_STEP] == 7.0
    with pytest.raises(ValueError, match="unknown phase"):
        t.mark("ray_startd", 1.0)


def test_the_slowest_task_gates_its_import_and_strategy_phases():
    t = tl.Timeline(origin=10.0)
    t.task_started(Started(replicas=2, timeline={"tf_import_start": 12.0, "tf_imported": 15.0, "strategy_ready": 16}))
    t.task_started(Started(replicas=2, timeline={"tf_import_start": 12.5, "tf_imported": 14.0, "strategy_ready": 17}))
    t.task_started(Started(replicas=2))  # a script's STARTED: no times
    t.task_started(Started(timeline="garbage"))
    assert t.seconds() == {tl.PROCESS_START: 0.0, tl.TASK_TF_IMPORT_START: 2.5, tl.TASK_TF_IMPORTED: 5.0,
                           tl.TASK_STRATEGY_READY: 7.0}


def test_process_start_parses_proc_stat_after_the_command_names_last_parenthesis():
    # Field 22 (starttime, clock ticks after boot) is the 20th after the ") " that ends the command's name.
    fields = ["S"] + ["0"] * 18 + ["250"] + ["0"] * 30
    stat = "4242 (a (weird) name) " + " ".join(fields)
    assert tl.process_start(stat, boot_time=1000.0, clock_ticks=100) == 1002.5
