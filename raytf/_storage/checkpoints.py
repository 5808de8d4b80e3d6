"""`CheckpointStore`: a run's checkpoints (`<run>/checkpoints/`) and its exported model (`<run>/model/`), each
committed by a marker written last, listing every file's size and SHA-256. The rules (names, which is newest,
what to prune, what a manifest says) are _core.checkpoints'; the I/O, through the run directory's retry rule."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import posixpath
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from raytf._core import checkpoints
from raytf._core.checkpoints import CheckpointEntry
from raytf._storage.layout import CHECKPOINTS_DIR, MODEL_DIR
from raytf.errors import StorageError

if TYPE_CHECKING:
    from raytf._storage.rundir import RunDir

log = logging.getLogger(__name__)


def _sha256(stream, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    while block := stream.read(chunk):
        h.update(block)
    return h.hexdigest()


def _manifest(local_dir: str) -> dict[str, dict[str, Any]]:
    """Every file of a local checkpoint directory: {relative posix path: {"bytes", "sha256"}}."""
    out = {}
    for root, _, files in os.walk(local_dir):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, local_dir).replace(os.sep, "/")] = {
                    "bytes": os.path.getsize(full), "sha256": _sha256(f)}
    return out


class CheckpointStore:
    """The checkpoints of one run directory (`RunDir.checkpoints`)."""

    def __init__(self, run_dir: RunDir) -> None:
        self.rd = run_dir

    def _dirs(self) -> tuple[set[str], set[str]]:
        """The directories under checkpoints/, and those with a commit marker (one listing, not retried)."""
        base = self.rd.path(CHECKPOINTS_DIR)
        infos = self.rd.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True))
        dirs, committed = set(), set()
        for info in infos:
            parts = posixpath.relpath(info.path, base).split("/")
            dirs.add(parts[0])
            if len(parts) == 2 and parts[1] == checkpoints.COMMIT_MARKER:
                committed.add(parts[0])
        return dirs, committed

    def _listed(self) -> tuple[set[str], set[str]]:
        return self.rd.retried("listing the checkpoints", self._dirs)

    def list(self) -> list[CheckpointEntry]:
        return checkpoints.entries_from_listing(*self._listed())

    def latest(self) -> CheckpointEntry | None:
        """The newest committed checkpoint (the one a retry or a relaunch resumes from, once verified)."""
        return checkpoints.latest_committed(self.list())

    def next_seq(self) -> int:
        """The lineage number the next checkpoint of this run takes (checkpoints._NAME)."""
        return checkpoints.next_seq(self._listed()[0])

    def uri(self, entry_dir: str) -> str:
        return self.rd.uri_of(CHECKPOINTS_DIR, entry_dir)

    def upload(self, local_dir: str, epoch: int, step: int, meta: dict[str, Any],
               before_commit: Callable[[], None] | None = None, seq: int = 0) -> str:
        """Copy a finished local checkpoint up (retried), then commit it by writing the marker last."""
        rd = self.rd
        name = checkpoints.checkpoint_name(epoch, step, seq)
        # The same name again (a script's final sync, Keras step checkpoints after a mid-epoch resume): the
        # committed copy stays until its replacement is committed, in a staging directory that resume finds.
        replacing = rd.exists(posixpath.join(CHECKPOINTS_DIR, name, checkpoints.COMMIT_MARKER))
        target = name + checkpoints.STAGING_SUFFIX if replacing else name
        files = _manifest(local_dir)  # the files as they are uploaded (a finished checkpoint, or a snapshot)
        try:
            # A partial copy from an earlier, interrupted try or attempt is started over.
            rd.retried(f"uploading checkpoint {name}",
                       lambda: rd.put_dir(local_dir, rd.path(CHECKPOINTS_DIR, target), replace=True), writes=True)
            if before_commit is not None:
                before_commit()
            rd.write_json(posixpath.join(CHECKPOINTS_DIR, target, checkpoints.COMMIT_MARKER),
                          {"epoch": epoch, "step": step, "seq": seq, **meta, checkpoints.MANIFEST_KEY: files})
        except StorageError:
            # Never committed: its partial copy goes now (on a full disk, the room the run's record needs).
            self._discard(target)
            raise
        if replacing:
            rd.retried(f"replacing checkpoint {name}", lambda: self._promote(target, name), writes=True)
        return self.uri(name)

    def _discard(self, entry_dir: str) -> None:
        try:
            self.rd.retried(f"removing the partial checkpoint {entry_dir}", lambda: self.rd.fs.delete_dir(
                self.rd.path(CHECKPOINTS_DIR, entry_dir)), retry=False)
        except (OSError, StorageError) as e:  # left for the next prune
            log.warning("%s", e)

    def _promote(self, staging: str, name: str) -> None:
        """The committed `staging` copy takes `name`'s place: the old copy goes, then the files are copied
        over with the marker last (so `name` is never committed half-copied), then the staging goes. Until
        `name` is committed again, listing finds the staging copy."""
        fs = self.rd.fs
        src, dst = self.rd.path(CHECKPOINTS_DIR, staging), self.rd.path(CHECKPOINTS_DIR, name)
        if fs.get_file_info(dst).type != pafs.FileType.NotFound:
            fs.delete_dir(dst)
        files = [i for i in fs.get_file_info(pafs.FileSelector(src, recursive=True)) if i.type == pafs.FileType.File]
        for i in sorted(files, key=lambda i: i.base_name == checkpoints.COMMIT_MARKER):
            out = posixpath.join(dst, posixpath.relpath(i.path, src))
            fs.create_dir(posixpath.dirname(out), recursive=True)
            fs.copy_file(i.path, out)
        fs.delete_dir(src)

    def verify(self, entry: CheckpointEntry) -> str | None:
        """What is wrong with a committed checkpoint's files against its marker's manifest (names, sizes, then
        each file's SHA-256, read through once), or None. Retried whole; a StorageError when storage fails."""
        return self.rd.retried(f"verifying checkpoint {entry.name}", lambda: self._verify(entry))

    def _verify(self, entry: CheckpointEntry) -> str | None:
        fs, base = self.rd.fs, self.rd.path(CHECKPOINTS_DIR, entry.dir)
        with fs.open_input_stream(posixpath.join(base, checkpoints.COMMIT_MARKER)) as f:
            raw = f.read()
        try:
            marker = json.loads(raw.decode())
        except (ValueError, UnicodeDecodeError):
            return "its commit marker is not JSON"
        manifest = marker.get(checkpoints.MANIFEST_KEY) if isinstance(marker, dict) else None
        found = {posixpath.relpath(i.path, base): i.size
                 for i in fs.get_file_info(pafs.FileSelector(base, recursive=True))
                 if i.type == pafs.FileType.File and posixpath.relpath(i.path, base) != checkpoints.COMMIT_MARKER}
        if problem := checkpoints.manifest_problem(manifest, found):
            return problem
        for rel in sorted(found):
            with fs.open_input_stream(posixpath.join(base, rel)) as f:
                if problem := checkpoints.digest_problem(manifest, rel, _sha256(f)):
                    return problem
        return None

    def trusted(self, verified: set[str]) -> tuple[CheckpointEntry | None, list[tuple[CheckpointEntry, str]]]:
        """The newest committed checkpoint whose files match its manifest, and the newer ones refused (with
        why). `verified` (directories already verified by this process) is skipped and added to."""
        refused = []
        for entry in sorted((e for e in self.list() if e.committed), reverse=True):
            if entry.dir not in verified:
                problem = self.verify(entry)
                if problem is not None:
                    refused.append((entry, problem))
                    continue
                verified.add(entry.dir)
            return entry, refused
        return None, refused

    def download(self, entry: CheckpointEntry, local_dir: str, *, marker: bool = True) -> str:
        """Copy a committed checkpoint into local_dir (without its commit marker: only its files as they were
        committed); returns the tf.train.Checkpoint prefix."""
        self.rd.download_dir(posixpath.join(CHECKPOINTS_DIR, entry.dir), local_dir)
        if not marker:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(local_dir, checkpoints.COMMIT_MARKER))
        return os.path.join(local_dir, checkpoints.TF_PREFIX)

    def prune(self, keep_last: int) -> list[str]:
        """Called by the one uploader after an upload (none is in flight): old checkpoints, and staging
        directories no longer needed. Housekeeping: a deletion that fails is left for the next prune."""
        dirs, committed = self._listed()
        doomed = [e.dir for e in checkpoints.to_prune(checkpoints.entries_from_listing(dirs, committed), keep_last)]
        doomed += checkpoints.stale_staging(dirs, committed)
        for d in doomed:
            try:
                self.rd.retried(f"pruning checkpoint {d}", lambda d=d: self.rd.fs.delete_dir(
                    self.rd.path(CHECKPOINTS_DIR, d)), retry=False)
            except (OSError, StorageError) as err:  # never fail a run for it
                log.warning("could not prune checkpoint %s: %s", d, err)
        return doomed

    def upload_model(self, local_dir: str) -> str:
        """The exported SavedModel to <run>/model/ (replacing an older export), marker written last."""
        rd = self.rd
        rd.retried("uploading the model", lambda: rd.put_dir(local_dir, rd.path(MODEL_DIR), replace=True),
                   writes=True)
        rd.write_json(posixpath.join(MODEL_DIR, checkpoints.COMMIT_MARKER), {"format": "tf_keras SavedModel"})
        return rd.uri_of(MODEL_DIR)

    def model_uri(self) -> str | None:
        """<run>/model/ when an export is committed there."""
        return self.rd.uri_of(MODEL_DIR) if self.rd.exists(f"{MODEL_DIR}/{checkpoints.COMMIT_MARKER}") else None
