"""benchmarks/script_end.py's pure parts: which /proc entries are a task's exited, unreaped script, and its table."""

from benchmarks.script_end import summary, zombie_of_a_task

# /proc/<pid>/stat lines: a command name may hold spaces and parentheses; the state follows the last ")".
_ZOMBIE = "4242 (python (x) y) Z 4100 4242 4242 0 -1 4194948 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0"
_RUNNING = "4242 (python) S 4100 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 9 0 777 0 0"


def test_a_task_actors_zombie_is_counted_and_nothing_else():
    assert zombie_of_a_task(_ZOMBIE, "ray::TaskActor.run_script")
    assert not zombie_of_a_task(_RUNNING, "ray::TaskActor.run_script")  # still running
    assert not zombie_of_a_task(_ZOMBIE, "bash")  # another parent's
    assert not zombie_of_a_task("", "")  # (gone while read)


def test_the_table_has_the_medians_the_maxima_and_the_slow_runs():
    rows = [{"conf": "a", "wall_s": w, "end_s": e} for w, e in ((10.0, 0.3), (11.0, 0.4), (40.0, 25.0))]
    lines = summary(rows, unreaped=3, longest_s=24.2).splitlines()
    assert lines[2] == "| 3 | 11.0 (40.0) | 0.40 (25.00) | 1 | 3 | 24.2 |"
