"""The output tee (raytf/_task/tee.py): a failing sink is dropped, the reading never stops."""

import io
import os
import re
import threading

import pytest

from raytf._task.tee import pump

pytestmark = [pytest.mark.timeout(60)]


class FailingFile(io.RawIOBase):
    """A log file whose disk fills after `good` bytes."""

    def __init__(self, good: int) -> None:
        self.data, self.good = bytearray(), good

    def write(self, b) -> int:
        if len(self.data) >= self.good:
            raise OSError(28, "No space left on device")
        self.data += bytes(b)
        return len(b)


def _run(file, original_w: int, chunks: list[bytes]) -> None:
    r, w = os.pipe()
    t = threading.Thread(target=pump, args=(r, original_w, file, "/runs/x/logs/worker0-attempt1.log"))
    t.start()
    for c in chunks:
        os.write(w, c)  # would block for good once the pipe filled, were the pump to stop reading
    os.close(w)
    t.join(30)
    assert not t.is_alive()


def test_a_failing_log_file_does_not_block_the_output():
    fwd_r, fwd_w = os.pipe()
    got = bytearray()

    def read_all() -> None:
        while chunk := os.read(fwd_r, 65536):
            got.extend(chunk)

    reader = threading.Thread(target=read_all)
    reader.start()
    chunks = [bytes([65 + i % 26]) * 65536 for i in range(8)]  # 512 KiB: far more than a pipe holds
    _run(FailingFile(good=1), fwd_w, chunks)
    os.close(fwd_w)
    reader.join(30)
    text = bytes(got)
    note = b"raytf: task log /runs/x/logs/worker0-attempt1.log no longer written: [Errno 28] No space left on device\n"
    assert text.count(note) == 1 and text.replace(note, b"") == b"".join(chunks)


def test_a_broken_forward_keeps_the_log_file_whole():
    fwd_r, fwd_w = os.pipe()
    os.close(fwd_r)  # nobody reads Ray's end any more: writes fail with EPIPE
    file = FailingFile(good=1 << 30)
    chunks = [b"x" * 100_000, b"y" * 100_000]
    _run(file, fwd_w, chunks)
    os.close(fwd_w)
    notes = re.findall(rb"\[raytf\] output no longer forwarded to Ray's log \(.*?\); only to this file\n", file.data)
    assert len(notes) == 1 and b"Broken pipe" in notes[0]
    assert bytes(file.data).replace(notes[0], b"") == b"x" * 100_000 + b"y" * 100_000


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
