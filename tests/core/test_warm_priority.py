"""A standby's TensorFlow import runs at the lowest CPU priority (raytf/_task/warm.py, `idle_cpu`), and afterwards
the whole process is back at its own: the importing thread and every thread the import started (TensorFlow starts
some, which would otherwise train at the lowest priority later). No TensorFlow here: a thread started in the block
stands for them."""

import os
import threading

import pytest

from raytf._task import warm


def _prio(tid: int = 0) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


@pytest.fixture
def may_lower():
    if not warm._may_raise_priority(_prio()):
        pytest.skip("this user may not raise a priority back (not root, RLIMIT_NICE): idle_cpu lowers nothing")


def test_threads_started_while_idle_are_back_at_the_normal_priority(may_lower):
    normal = _prio()
    started, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def helper():
        tid.append(threading.get_native_id())
        started.set()
        done.wait(30)

    before = warm.threads()
    # A daemon, and released in `finally`: an assertion failing in the block must not hold the process for 30 s.
    t = threading.Thread(target=helper, daemon=True)
    try:
        with warm.idle_cpu():
            assert _prio() == warm._LOWEST
            t.start()
            assert started.wait(30)
            assert _prio(tid[0]) == warm._LOWEST  # inherited from the thread that started it
        assert tid[0] in warm.threads() - before
        assert _prio() == normal
        assert _prio(tid[0]) == normal
    finally:
        done.set()
        if t.is_alive():
            t.join(30)


def test_not_idle_changes_no_priority():
    normal = _prio()
    with warm.idle_cpu(idle=False):
        assert _prio() == normal
    assert _prio() == normal
