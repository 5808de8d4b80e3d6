"""A script whose end finds a tf.data iterator's teardown stuck (tests/task/test_script_host.py), unless $STUCK is
0: a thread in raytf's list of teardowns that never ends, as TensorFlow's race holds one for up to a minute; a file
it never closes; an exit handler; and an object whose finalizer says whether the interpreter's shutdown ran (which a
thread inside TensorFlow's destructor could crash). It exits with status 3."""

import atexit
import os
import sys
import threading

from raytf._task import tfdata


class Finalized:
    def __del__(self):
        print("the interpreter's shutdown ran", file=sys.stderr, flush=True)


if os.environ["STUCK"] == "1":
    stuck = threading.Thread(target=threading.Event().wait, daemon=True, name="raytf-iterator-teardown")
    stuck.start()
    tfdata._threads.append(stuck)
out = open(os.environ["STUCK_OUT"], "w")  # noqa: SIM115 (never closed: the interpreter's exit would flush it)
out.write("the last line")
atexit.register(print, "the script's exit handler ran", file=sys.stderr, flush=True)
alive_at_exit = Finalized()
sys.exit(3)
