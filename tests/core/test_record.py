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
