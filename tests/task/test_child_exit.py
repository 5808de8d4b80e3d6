"""A script's process leaves past a tf.data iterator's teardown stuck in TensorFlow's race (raytf/_task/tfdata.py):
at once after the script's own exit handlers, with its exit status, its open files' buffers written; and exits as
always when nothing is stuck. The stuck teardown is a thread in tfdata's list that does not end (the race holds
TF's for up to a minute); no TensorFlow here."""

import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(120)

_PROGRAM = """
import atexit, sys, threading
from raytf._task import tfdata
from raytf._task.script import leaving

atexit.register(leaving.past_teardowns)             # as child.main does before the script
if {stuck}:
    stuck = threading.Thread(target=threading.Event().wait, daemon=True, name="raytf-iterator-teardown")
    stuck.start()
    tfdata._threads.append(stuck)
log = open({path!r}, "w")                               # the script's own file, never closed
log.write("the last line")
atexit.register(lambda: print("the script's exit handler ran", flush=True))
leaving.status = 3
sys.exit(3)
"""


@pytest.mark.parametrize("stuck", [True, False], ids=["stuck", "none"])
def test_the_exit_leaves_past_a_stuck_teardown_with_its_status_and_files(tmp_path, stuck):
    path = tmp_path / "out.txt"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _PROGRAM.format(stuck=stuck, path=str(path))], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert proc.returncode == 3, proc.stderr
    assert "the script's exit handler ran" in proc.stdout
    assert path.read_text() == "the last line"
    assert took < 10, took  # (not the teardown wait: the grace is half a second)
