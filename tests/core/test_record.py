"""The run's last writes (raytf/_driver/record.py): each is tried, and none hides the error that ended the run."""

from types import SimpleNamespace

import pytest

from raytf._core import timeline as tl
from raytf._driver.record import RunRecord
from raytf.errors import StorageError


class Record(RunRecord):
    def __init__(self) -> None:
        self.run_dir = SimpleNamespace(uri="file:///runs/r")
        self.run = SimpleNamespace(error=None)  # (the run's own failure: none)
        self.calls: list = []
        self.timeline = tl.Timeline(origin=0.0)

    def write_curves(self) -> None:
        self.calls.append("curves")

    def write_metrics(self, retry: bool = True) -> None:
        raise StorageError("metrics.parquet: no space left on device")

    def write_result(self, status: str, lock_timeout_s: float = -1) -> None:
        self.calls.append(("result", status))


def test_a_failed_write_after_a_failure_does_not_replace_it_and_the_others_still_happen():
    r = Record()
    r.end("failed", ended_by=KeyboardInterrupt(), closing=(lambda: r.calls.append("sinks"),))
    assert r.calls == ["sinks", "curves", ("result", "failed")]
    # The timeline marks what was written (the curves), never what failed (metrics.parquet), and result.json's start.
    assert list(r.timeline.seconds()) == [tl.PROCESS_START, tl.CURVES_WRITTEN, tl.RESULT_WRITTEN]


def test_a_failed_write_after_a_success_is_raised_once_all_were_tried():
    r = Record()
    with pytest.raises(StorageError, match="no space left"):
        r.end("succeeded", ended_by=None)
    assert r.calls == ["curves", ("result", "succeeded")]


def test_a_failed_runs_own_error_comes_first_and_an_unwritable_result_names_the_last_good_checkpoint(caplog):
    """A run that failed (its error is what the caller raises) is not replaced by a write's; result.json that
    cannot be written says what it would have held and where the last committed checkpoint is (raytf issue 71)."""
    r = Record()
    r.run = SimpleNamespace(error=StorageError("storage refused every checkpoint"))
    r.cfg = SimpleNamespace(run=SimpleNamespace(name="r"))
    latest = SimpleNamespace(dir="ckpt-n00000002-e000002-s0000000020")
    r.run_dir.checkpoints = SimpleNamespace(latest=lambda: latest, uri=lambda d: f"file:///runs/r/checkpoints/{d}")

    def refused(status, lock_timeout_s=-1):
        raise StorageError("writing /runs/r/result.json failed after 6 tries: [Errno 1] Operation not permitted")

    r.write_result = refused
    r.end("failed", ended_by=None)  # (not raised: the run's failure is what the caller sees)
    (line,) = [rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("result.json not written")]
    assert "[Errno 1] Operation not permitted): the run ended failed; its last committed checkpoint is " in line
    assert "file:///runs/r/checkpoints/ckpt-n00000002-e000002-s0000000020 (a relaunch of run.name=r resumes" in line


def test_a_plot_that_cannot_be_drawn_is_a_warning_not_the_runs_failure(monkeypatch, caplog):
    # (matplotlib broken, or two threads importing it at once: "partially initialized module 'matplotlib.ticker'")
    from raytf._driver import figures

    def broken(*a, **k):
        raise ImportError("cannot import name 'NullFormatter' from partially initialized module 'matplotlib.ticker'")

    monkeypatch.setattr(figures, "png_bytes", broken)
    r = RunRecord.__new__(RunRecord)
    r.cfg = SimpleNamespace(run=SimpleNamespace(name="r"))
    r.metrics = SimpleNamespace(to_arrow=lambda: None)
    r.run_dir = SimpleNamespace(write_bytes=lambda name, data: pytest.fail("nothing to write"))
    monkeypatch.setattr(figures, "learning_curves", lambda table: SimpleNamespace(empty=False))
    monkeypatch.setattr(figures, "size_changes", lambda table: [])
    r.write_curves()
    assert "learning curves not plotted: ImportError: cannot import name 'NullFormatter'" in caplog.text
