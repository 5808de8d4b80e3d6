"""Live progress on the driver: a tqdm bar per epoch on a terminal or in a notebook, log lines otherwise."""

from __future__ import annotations

import logging
import sys

from raytf import events as ev

log = logging.getLogger("raytf")


class Progress:
    def __init__(self, *, epochs: int | None, steps_per_epoch: int | None, batch_size: int | None,
                 quiet: bool = False, rank: int = 0) -> None:
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.batch_size = batch_size  # per replica
        self.replicas = 1
        self.rank = rank
        # A terminal, or a notebook (tqdm.auto draws a widget there).
        self.bars = not quiet and (sys.stderr.isatty() or "ipykernel" in sys.modules)
        self._bar = None
        self._epoch = None

    def _open(self, epoch: int, step: int) -> None:
        from tqdm.auto import tqdm

        self._close()
        self._epoch = epoch
        self._bar = tqdm(total=self.steps_per_epoch, desc=f"epoch {epoch}/{self.epochs or '?'}", unit="step",
                         leave=True, dynamic_ncols=True)
        if self.steps_per_epoch:
            self._bar.n = step - (epoch - 1) * self.steps_per_epoch
            self._bar.refresh()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __call__(self, e: ev.Event) -> None:
        if e.kind == ev.OUTPUT:
            self.output(e)
            return
        if e.kind == ev.STARTED:
            self.replicas = max(self.replicas, int(e.payload.get("replicas", 1)))
            if e.rank == self.rank and "epochs" in e.payload:  # a script's Model.fit began
                self.epochs, self.steps_per_epoch = e.payload["epochs"], e.payload["steps_per_epoch"]
            return
        p = e.payload
        metrics = p.get("metrics", {})
        if e.kind == ev.EVAL:
            log.info("evaluator, checkpoint of epoch %d step %d: %s", p["epoch"], p["step"],
                     " ".join(f"{k}={v:.4g}" for k, v in metrics.items()))
            return
        if e.rank != self.rank or e.kind not in (ev.STEP, ev.EPOCH):
            return
        shown = {k: f"{v:.4g}" for k, v in metrics.items() if k != "steps_per_s"}
        if "steps_per_s" in metrics and not self.batch_size:
            shown["steps/s"] = f"{metrics['steps_per_s']:.3g}"
        elif "steps_per_s" in metrics:
            shown["ex/s"] = f"{metrics['steps_per_s'] * self.batch_size * self.replicas:.0f}"
        if e.kind == ev.STEP and self.bars:
            if self._epoch != p["epoch"]:
                self._open(p["epoch"], p["step"])
            if self.steps_per_epoch:
                self._bar.n = min(self.steps_per_epoch, p["step"] - (p["epoch"] - 1) * self.steps_per_epoch)
            else:
                self._bar.n = p["step"]
            self._bar.set_postfix(shown, refresh=True)
        elif e.kind == ev.EPOCH:
            if self._bar is not None:
                if self.steps_per_epoch:
                    self._bar.n = self.steps_per_epoch
                self._bar.set_postfix(shown, refresh=True)
                self._close()
                self._epoch = None
            log.info("epoch %d/%s step %d: %s", p["epoch"], self.epochs or "?", p["step"],
                     " ".join(f"{k}={v}" for k, v in shown.items()))

    def output(self, e: ev.Event) -> None:
        """A script's streamed stdout/stderr lines, prefixed with role and rank, above the progress bar."""
        prefix = f"[{e.role} {e.rank}] "
        for stream, text in e.payload.get("lines", []):
            out = sys.stderr if stream == "err" else sys.stdout
            if self._bar is not None:
                from tqdm.auto import tqdm

                tqdm.write(prefix + text, file=out)
            else:
                print(prefix + text, file=out, flush=True)

    def close(self) -> None:
        self._close()
