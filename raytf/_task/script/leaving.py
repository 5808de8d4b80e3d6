"""How a script's process leaves (script/child.py): its open files' buffers written, as `python script.py` would
have written them, and past a tf.data iterator's teardown that TensorFlow's race holds (raytf/_task/tfdata.py). Runs
in the script's process only."""

from __future__ import annotations

import gc
import io
import os
import stat
import sys

# How long the exit waits for tf.data iterators' teardowns before leaving without them (`past_teardowns`): one not
# hit by TensorFlow's race is done in milliseconds. (0.5 s held most script runs' ends that long: the cold CLI's
# script run saw its end 0.60 s after its last Model.fit's, 0.27 s with 0.1; raytf issue 53.)
TEARDOWN_GRACE_S = 0.1
status = 1  # the script's exit status, for `past_teardowns`: child.main sets it; 1 if an error escapes main


def flush_open_files() -> None:
    """What the interpreter's shutdown would still have written: the buffers of the regular files left open (a
    script's own, never closed) and of TensorFlow's summary writers, and the standard streams. A script run by
    runpy, as raytf runs it, keeps its globals in a reference cycle: a file it never closed is collected late in the
    interpreter's shutdown, and its buffer was lost (CPython's gh-62052; `python script.py` clears its module first).
    """
    tf = sys.modules.get("tensorflow")
    writer = getattr(getattr(tf, "summary", None), "SummaryWriter", None)
    for obj in gc.get_objects():
        try:
            if isinstance(obj, io.IOBase):
                # (regular files only: a pipe or socket whose reader is gone could block the exit for good)
                if not obj.closed and stat.S_ISREG(os.fstat(obj.fileno()).st_mode):
                    obj.flush()
            elif writer is not None and isinstance(obj, writer):
                obj.flush()
        except Exception:  # (closed meanwhile, no descriptor, a writer whose resource is gone: nothing to write)
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def past_teardowns() -> None:
    """The last of the interpreter's exit handlers (registered before the script's own, which run first): the open
    files' buffers written (`flush_open_files`); then, when a tf.data iterator's teardown is still inside TensorFlow
    (TF's race, raytf/_task/tfdata.py: up to a minute after the iterator's last use), leave now rather than wait for
    it: the interpreter's shutdown must not meet that thread (a crash), and waiting for it held the end of 8 of 10
    script runs here by 16-21 s (benchmarks.recovery --early --script's job, 2026-11-28: its retry's iterators ~26 s
    old). Only the finalizers of the objects still alive at exit are skipped then, which Python never promises to
    run."""
    from raytf._task import tfdata

    flush_open_files()
    if tfdata.wait(timeout_s=TEARDOWN_GRACE_S):
        return
    os._exit(status)
