"""A task's output (raytf/_task/tee.py): all of it into the log, what is shown to the driver, never to Ray's fds; a
failing log file is given up, the reading never stops."""

import io
import os
import threading

import pytest

from raytf._core import events as ev
from raytf._task.lines import Shown
from raytf._task.tee import CHUNK, OutputCapture, TaskOutput

pytestmark = [pytest.mark.timeout(60)]

ONEDNN = ("I0000 00:00:1795495795.341762   29698 port.cc:153] oneDNN custom operations are on. You may see slightly "
          "different numerical results due to floating-point round-off errors from different computation orders.")


class FailingFile(io.RawIOBase):
    """A log file whose disk fills after `good` bytes."""

    def __init__(self, good: int) -> None:
        self.data, self.good = bytearray(), good

    def write(self, b) -> int:
        if len(self.data) >= self.good:
            raise OSError(28, "No space left on device")
        self.data += bytes(b)
        return len(b)


def test_a_failing_log_file_does_not_block_the_output():
    pushed = []
    out = TaskOutput(FailingFile(good=1), lambda kind, p: pushed.extend(p["lines"]), Shown(streamed=False),
                     log_name="the task's log /runs/x/logs/worker0-attempt1.log")
    r, w = os.pipe()
    t = threading.Thread(target=out.read, args=(lambda: os.read(r, CHUNK), "out"))
    t.start()
    for i in range(8):  # 512 KiB: far more than a pipe holds; would block for good, were the reading to stop
        os.write(w, bytes([65 + i % 26]) * 65535 + b"\n")
    os.close(w)
    t.join(30)
    assert not t.is_alive()
    os.close(r)
    out.end(ok=True)
    # Said once, from a rank whose output is not streamed too: its log is all there is of it.
    assert pushed == [["err", "[raytf: the task's log /runs/x/logs/worker0-attempt1.log is no longer written: "
                              "[Errno 28] No space left on device]"]]


def test_capture_keeps_everything_and_shows_the_driver_its_part(tmp_path, capfd):
    """What is written to fds 1 and 2 (a child process's print, TF's C++ logging, raytf's logger): all in the log;
    the driver is sent the program's lines and raytf's, not TF's; nothing reaches the fds Ray reads (its
    log_to_driver would print it all again)."""
    import subprocess
    import sys

    from raytf._storage import RunDir

    pushed = []
    capture = OutputCapture(RunDir(str(tmp_path), "r"), "logs/worker0-attempt1.log",
                            lambda kind, p: pushed.append((kind, p)), Shown(streamed=True))
    try:
        subprocess.run([sys.executable, "-c", "print('hello from worker 0')"], check=True, timeout=30)
        os.write(2, ONEDNN.encode() + b"\n")
        os.write(2, b"WARNING raytf.test: a warning of raytf's\n")
    finally:
        capture.close()
    logged = (tmp_path / "r/logs/worker0-attempt1.log").read_text().splitlines()
    assert sorted(logged) == sorted(["hello from worker 0", ONEDNN, "WARNING raytf.test: a warning of raytf's"])
    lines = [line for kind, p in pushed if kind == ev.OUTPUT for line in p["lines"]]
    assert sorted(lines) == [["err", "WARNING raytf.test: a warning of raytf's"], ["out", "hello from worker 0"]]
    seen = capfd.readouterr()
    assert "hello" not in seen.out and "oneDNN" not in seen.err and "raytf.test" not in seen.err


def test_the_log_is_never_written_through_a_planted_symlink(tmp_path):
    from raytf._task.tee import open_log
    from raytf.errors import RaytfError

    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    link = tmp_path / "worker0-attempt1.log"
    link.symlink_to(victim)
    with pytest.raises(RaytfError, match="is a symlink"):
        open_log(str(link))
    assert victim.read_text() == "keep me\n"
    with open_log(str(tmp_path / "plain.log")) as f:
        f.write(b"line\n")
    assert (tmp_path / "plain.log").read_bytes() == b"line\n"
