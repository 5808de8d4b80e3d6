"""`raytf.report(...)`: one call that sends a metrics row to the driver, from a training function or from an
unmodified script run with train.script. Light on purpose (no Ray, TensorFlow or pyarrow): a script imports it.

The process's sink is its TrainContext (function mode) or, in a script's child process, its ScriptReporter
(JSON lines on a pipe its raytf host reads). Run by hand, outside raytf, `report` does nothing, so the same
script runs both ways.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from raytf._core.events import EPOCH, STEP


class ReportSink(Protocol):
    """What `raytf.report` hands a row to: TrainContext or ScriptReporter."""

    def report_explicit(self, metrics: Mapping[str, Any] | None, *, step: int | None, epoch: int | None,
                        kind: str, checkpoint: bool) -> None: ...


_sink: ReportSink | None = None  # this process's TrainContext or ScriptReporter


def set_sink(sink: ReportSink | None) -> None:
    global _sink
    _sink = sink


def report(metrics: Mapping[str, Any] | None = None, *, step: int | None = None, epoch: int | None = None,
           kind: str = STEP, checkpoint: bool = False) -> None:
    """Send a metrics row to the driver (into metrics.parquet, the progress line and TensorBoard).

    In a script (train.script), for custom loops that do not use Keras `fit` (whose metrics raytf captures on
    its own): `raytf.report({"loss": loss}, step=step)` after a step, `raytf.report({...}, epoch=e, kind="epoch")`
    after epoch `e` (counted from 1). Without `step`, each step report advances the step count by one. Every
    call is a row (one event to the driver): in a loop of millisecond steps, call it every few dozen steps.
    `checkpoint=True` says a checkpoint was just written under $RAYTF_CHECKPOINT_DIR: the chief's copy is
    then synced to the run's storage (other ranks ignore it).

    In a training function it is `ctx.report(metrics, kind=kind)`; there the context counts steps and
    `ctx.save()` checkpoints. Outside raytf it does nothing.

    Args:
        metrics: {name: number}; tensors and numpy scalars are converted, other values skipped.
        step: global step of this row (script mode).
        epoch: completed epochs (script mode).
        kind: "step" or "epoch".
        checkpoint: sync $RAYTF_CHECKPOINT_DIR to storage now (script mode, chief).
    """
    if kind not in (STEP, EPOCH):
        raise ValueError(f"raytf.report: kind ({kind!r}) must be 'step' or 'epoch'")
    sink = _sink
    if sink is not None:
        sink.report_explicit(metrics, step=step, epoch=epoch, kind=kind, checkpoint=checkpoint)
