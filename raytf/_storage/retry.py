"""The one retry rule of every storage access (RunDir.retried): an OSError retried with exponential back-off, an
answer (a file that is not there) raised as it is; what fails every try is a StorageError naming what it was."""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from raytf._core import backoff
from raytf.errors import StorageError

log = logging.getLogger("raytf._storage.rundir")  # (the name its lines always had)

T = TypeVar("T")


# Answers, not failures: a retry would get the same (a file that is not there is not there).
ANSWERS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError, PermissionError)
# A write's: a refused write is retried like an outage (permissions being fixed, an object store's credentials
# refreshed, a quota raised: raytf issue 71, a 10 s refusal failed a run's commit as the program's error); a read's
# refusal stays an answer (a path the user may not read is said at once).
WRITE_ANSWERS = tuple(e for e in ANSWERS if e is not PermissionError)


def with_retries(what: str, fn: Callable[[], T], retries: int, backoff_s: float,
                 answers: tuple[type[OSError], ...] = ANSWERS) -> T:
    """Run fn, retrying OSError (storage unreachable, throttled, a full disk) with exponential back-off; what
    fails every try is a StorageError naming `what`. An answer (`answers`: not found, ...) is raised as it is."""
    for attempt in range(retries + 1):
        try:
            return fn()
        except answers:
            raise
        except OSError as e:
            if attempt == retries:
                full = " (no space left on the device)" if e.errno == errno.ENOSPC else ""
                raise StorageError(f"{what} failed after {retries + 1} tries{full}: {e}") from e
            delay = backoff.delay(attempt + 1, backoff_s)
            log.warning("%s failed (%s); retrying in %.1fs", what, e, delay)
            time.sleep(delay)  # back-off between tries of a failing remote call
    raise AssertionError("unreachable")
