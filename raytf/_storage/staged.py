"""A file or directory of the run directory that this node writes while the run goes (a task's log, TensorBoard's
event files): written in place on a local run directory (readable live: TensorBoard can watch it), else in a
temporary directory of this node, uploaded once complete."""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
import tempfile
from typing import TYPE_CHECKING

from raytf.errors import RaytfError

if TYPE_CHECKING:
    from raytf._storage.rundir import RunDir

log = logging.getLogger(__name__)


class Staged:
    """`path` is where to write `rel` (a directory with `is_dir`); `close()` uploads it when it was not written in
    place, and removes the local copy."""

    def __init__(self, run_dir: RunDir, rel: str, *, is_dir: bool, prefix: str) -> None:
        self.run_dir, self.rel, self.is_dir = run_dir, rel, is_dir
        self.in_place = run_dir.local
        if self.in_place:
            self.path = run_dir.path(rel)
            self._tmp = None
            os.makedirs(self.path if is_dir else os.path.dirname(self.path), exist_ok=True)
        else:
            self._tmp = tempfile.mkdtemp(prefix=prefix)
            self.path = self._tmp if is_dir else os.path.join(self._tmp, posixpath.basename(rel))

    def discard(self) -> None:
        """The local copy goes, uploaded or not (a driver about to leave by os._exit)."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def close(self, *, publish: bool = True, retry: bool = True, what: str = "") -> None:
        """Upload what was written (`publish`; a failure is a warning naming `what`), then the local copy goes."""
        if self.in_place or self._tmp is None:
            return
        try:
            if publish:
                upload = self.run_dir.upload_dir if self.is_dir else self.run_dir.upload_file
                upload(self.path, self.rel, retry=retry)
        except (OSError, RaytfError) as e:
            log.warning("%s not uploaded to %s: %s", what or self.rel, self.run_dir.uri_of(self.rel), e)
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
