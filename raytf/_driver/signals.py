"""How the CLI's process takes the signals that end a launch the way Ctrl-C does (raytf issue 71): a final
checkpoint at one agreed step, the teardown, an `interrupted` result.json, and an exit code of 128 + the signal, as a
shell reports it. No Ray at import (the launch's bad input is refused without loading it)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading

# The signals that end a launch the way Ctrl-C does (a final checkpoint at one agreed step, the teardown, an
# `interrupted` result.json), each with its exit code (128 + the signal, as a shell reports it): SIGTERM (kill,
# systemd, Kubernetes, Slurm) and SIGHUP (a closed terminal, a dropped ssh session). A second signal of any of
# them (or Ctrl-C) during the final save stops at once, as a second Ctrl-C does (attempt_drive.drive).
STOPPING = {signal.SIGTERM: 143, signal.SIGHUP: 129}
_stopped_by: int | None = None  # the first such signal, once one came
_held = False  # while Ray starts or connects: a signal then stops the launch once it has (`Holding`)


def _on_signal(signum, frame) -> None:
    global _stopped_by
    if _stopped_by is None:
        _stopped_by = signum
        if signum == signal.SIGHUP:
            _detach_from_a_closed_terminal()
    if not _held:
        raise KeyboardInterrupt


def _detach_from_a_closed_terminal() -> None:
    """After SIGHUP, the terminal this process wrote to is gone: a write to it fails (EIO), and would end the
    final save in an OSError. Its standard streams go to /dev/null instead; streams that are files or pipes
    (nohup, a log) stay as they are."""
    devnull = None
    for fd in (1, 2):
        try:
            if os.isatty(fd):
                devnull = os.open(os.devnull, os.O_WRONLY) if devnull is None else devnull
                os.dup2(devnull, fd)
        except OSError:
            pass


def install() -> None:
    if threading.current_thread() is threading.main_thread():  # (Python sets handlers there only)
        for signum in STOPPING:
            signal.signal(signum, _on_signal)


class Holding:
    """Signals held while Ray starts or connects (ray.init, whose own SIGTERM handler, `sys.exit(15)`, replaces
    raytf's: ray/_private/worker.py): raytf's handlers are put back once it returns, and a signal that came
    meanwhile stops the launch then, with Ray up and so taken down in order. A SIGTERM that Ray's handler took
    (ray.init under way) stops it the same way; `cut_short` then says that Ray may be half started (the launch's
    end takes it down: ray.shutdown ends whatever this process started, up or not)."""

    cut_short = False

    def __enter__(self) -> Holding:
        global _held
        _held = True
        install()
        self._ray_handler = self._keep_ours()
        return self

    @staticmethod
    def _keep_ours():
        """Ray's own handler kept out while ray.init runs (private: raytf/_core/private_apis.py, SIGNALS_KEPT; a
        SIGTERM it took mid-init once left a launch hung in ray.init's start of its Ray): what it replaced."""
        from raytf._core import private_apis as apis

        if not apis.available(apis.SIGNALS_KEPT, logging.getLogger("raytf").warning):
            return None
        holder, name = apis.owner(apis.SIGTERM_HANDLER)
        original = getattr(holder, name)
        setattr(holder, name, lambda handler: None)
        return holder, name, original

    def __exit__(self, kind, exc, tb) -> None:
        global _held, _stopped_by
        if self._ray_handler is not None:
            holder, name, original = self._ray_handler
            setattr(holder, name, original)
        _held = False
        install()
        if kind is SystemExit and exc.code == signal.SIGTERM and _stopped_by is None:  # (Ray's handler's exit)
            _stopped_by, self.cut_short = signal.SIGTERM, True
            raise KeyboardInterrupt from None
        if _stopped_by is not None and kind is None:
            raise KeyboardInterrupt


def exit_code() -> int:
    """The launch's exit code after an interrupt: 143, 129, or Ctrl-C's 130."""
    return STOPPING.get(_stopped_by, 130)


@contextlib.contextmanager
def for_the_command():
    """One command's signals: none had come at its start, and the process's own handlers (a test's, a notebook's:
    the command may run in a process that outlives it) put back at its end."""
    global _stopped_by
    _stopped_by = None
    before = {signum: signal.getsignal(signum) for signum in STOPPING}
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in before.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
