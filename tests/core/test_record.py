"""The run's last writes (raytf/_driver/record.py): each is tried, and none hides the error that ended the run."""

from types import SimpleNamespace

import pytest

from raytf._core import timeline as tl
from raytf._driver.record import RunRecord
from raytf.errors import StorageError


class Record(RunRecord):
    def __init__(self) -> None:
        self.run_dir = SimpleNamespace(uri="file:///runs/r")
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
