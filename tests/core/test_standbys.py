"""Use, wait for, or skip the standbys (raytf/_core/standbys.py, raytf issue 53). Pure."""

from raytf._core import standbys
from raytf._core.standbys import Take, take


def test_ready_standbys_first_then_those_still_importing_and_new_processes_only_for_the_rest():
    assert take(2, ready=2, warming=0) == Take(2, 0, 0)
    assert take(2, ready=0, warming=2) == Take(0, 2, 0)  # a run right after another: it waits for their import
    assert take(2, ready=1, warming=2) == Take(1, 1, 0)
    assert take(3, ready=1, warming=1) == Take(1, 1, 1)  # a new process only for the task no standby is there for
    assert take(2, ready=0, warming=0) == Take(0, 0, 2)
    assert take(1, ready=3, warming=2) == Take(1, 0, 0)  # (the rest stay the pool's)


def test_released_standbys_are_swept_here_on_nodes_that_share_this_place_and_by_a_task_elsewhere():
    """A node whose tasks shared the driver's place (its root noted at their teardown) is swept in the driver's
    process, its standbys' known pids waited for under that root; any other node (none noted, or noted without a
    root) by a Ray task there. Two local nodes under one root (two raylets on one machine) are one sweep of it,
    waiting for both."""
    here, there = standbys.sweeps({"a": (11, 12), "b": (), "c": (31,), "d": (41,)},
                                  {"a": "/tmp/raytf-scratch", "c": "/tmp/raytf-scratch", "d": ""})
    assert here == {"/tmp/raytf-scratch": (11, 12, 31)}
    assert there == {"b": (), "d": (41,)}
    assert standbys.sweeps({}, {"a": "/r"}) == ({}, {})


def test_an_attempt_asks_for_standbys_at_its_first_step_unless_its_ray_ends_with_the_run():
    # Where Ray outlives the run (a notebook's session, a sweep's trials, a CLI command on a running cluster): at the
    # first step, so that a failure at any point after it, or the session's next run, starts in them.
    assert standbys.refill_after_s(0.0, one_run=False) == 0.0
    assert standbys.refill_after_s(2.0, one_run=False) == 2.0  # (the driver's setting stands)
    # The CLI's own Ray, stopped with the run: once their import is a small part of it.
    assert standbys.refill_after_s(0.0, one_run=True) == standbys.ONE_RUN_REFILL_AFTER_S == 20.0
    assert standbys.refill_after_s(30.0, one_run=True) == 30.0
