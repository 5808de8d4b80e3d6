"""The run directory on shared storage: the only module that reads or writes it (through pyarrow.fs)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import posixpath
import time
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from raytf._core import checkpoints, metrics
from raytf._s3 import s3_credentials, s3_filesystem, with_query_options
from raytf.config import StorageConfig
from raytf.config.redact import redact_storage_path, redact_text, without_userinfo
from raytf.errors import StorageError

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
RESULT_FILE = "result.json"
METRICS_FILE = "metrics.parquet"
METRICS_PARTS_DIR = "metrics.parts"  # while a run goes: one Parquet file per flush (see RunDir.append_metrics)
METRICS_PARTS_KEY = b"raytf.parts"  # metrics.parquet's schema metadata: the parts it already includes
CHECKPOINTS_DIR = "checkpoints"
MODEL_DIR = "model"
WORKDIR_DIR = "workdir"


# A task's files in the run directory, named by role and task index (worker1, ps0: TF's names for it).
def task_log(role: str, index: int, attempt: int) -> str:
    """The task's captured stdout/stderr."""
    return f"logs/{role}{index}-attempt{attempt}.log"


def task_log_dir(role: str, index: int, attempt: int) -> str:
    """What the task's program wrote into its own log directory ($RAYTF_LOG_DIR, ctx.log_dir)."""
    return f"logs/{role}{index}-attempt{attempt}"


def task_workdir(role: str, index: int) -> str:
    """What the task's program wrote into its working directory (each attempt's over the last's)."""
    return f"{WORKDIR_DIR}/{role}{index}"


# Test seam: a one-machine test cluster cannot show a node whose local disk differs from the driver's. A raylet
# started with this variable set makes its tasks see local paths under that root instead, as such a node would.
NODE_LOCAL_ROOT_ENV = "RAYTF_TEST_NODE_LOCAL_ROOT"
STORAGE_CHECK_PREFIX = ".storage-check-"


def resolve(path: str, options: StorageConfig | None = None) -> tuple[pafs.FileSystem, str, str]:
    """(filesystem, path inside it, canonical URI) for a local path or a pyarrow URI."""
    if "://" not in path:
        local = os.path.abspath(os.path.expanduser(path))
        seen_as = os.environ.get(NODE_LOCAL_ROOT_ENV, "") + local
        return pafs.LocalFileSystem(), seen_as, local
    base, _, query = path.partition("?")
    o = options or StorageConfig(path=path)
    try:
        credentials = s3_credentials(o) if path.startswith("s3://") else {}
        if path.startswith("s3://") and (not query or credentials):
            fs = s3_filesystem(with_query_options(o, query), credentials)
            inner = base.removeprefix("s3://")
        else:  # other schemes, or S3 options given in the URI's query (?endpoint_override=...&scheme=http)
            fs, inner = pafs.FileSystem.from_uri(path)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
        # (a run's path holds no credentials: validate refuses them; a reader's may, and pyarrow echoes it)
        raise StorageError(f"storage.path ({redact_storage_path(path)!r}) cannot be opened: "
                           f"{redact_text(str(e))}") from None
    return fs, inner.rstrip("/"), without_userinfo(base.rstrip("/"))


def with_retries(what: str, fn: Callable[[], Any], retries: int, backoff_s: float) -> Any:
    """Run fn, retrying OSError (storage unreachable, throttled) with exponential back-off."""
    for attempt in range(retries + 1):
        try:
            return fn()
        except OSError as e:
            if attempt == retries:
                raise StorageError(f"{what} failed after {retries + 1} tries: {e}") from e
            delay = backoff_s * 2**attempt
            log.warning("%s failed (%s); retrying in %.1fs", what, e, delay)
            time.sleep(delay)  # back-off between tries of a failing remote call
    raise AssertionError("unreachable")


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


class RunDir:
    """`<storage.path>/<run.name>/`: config, result, metrics and checkpoints of one run."""

    def __init__(self, storage: str | StorageConfig, run_name: str) -> None:
        options = storage if isinstance(storage, StorageConfig) else StorageConfig(path=storage)
        self.run_name = run_name
        self.fs, base, base_uri = resolve(options.path, options)
        # Canonical (absolute for local paths) so a task on another node resolves the same place; a URI
        # keeps its query (S3 options) for the tasks, while `uri` (shown and recorded) drops it.
        self.options = dataclasses.replace(options, path=base_uri if "://" not in options.path else options.path)
        self.storage_path = base_uri
        self.root = posixpath.join(base, run_name)
        self.uri = posixpath.join(base_uri, run_name)
        self._local = isinstance(self.fs, pafs.LocalFileSystem)

    def __reduce__(self):
        # Filesystem handles are rebuilt from the URI on the other side, with that node's credentials (its
        # environment, or storage.credentials_file read there): pyarrow's S3FileSystem pickles its keys, and
        # storage keys given in this process never go into task arguments either.
        return (RunDir, (dataclasses.replace(self.options, access_key=None, secret_key=None), self.run_name))

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def uri_of(self, *parts: str) -> str:
        return posixpath.join(self.uri, *parts)

    # -- plain files -------------------------------------------------------------------------
    def makedirs(self, rel: str = "") -> None:
        try:
            self.fs.create_dir(self.path(rel) if rel else self.root, recursive=True)
        except OSError as e:
            raise StorageError(f"cannot create {self.uri_of(rel)} (storage.path={self.storage_path!r}): {e}") from None

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound

    def write_bytes(self, rel: str, data: bytes, *, retry: bool = True) -> None:
        """Write a whole file so readers see the old content or the new one, never a part; retried with
        back-off unless `retry` is false (a periodic write that the next one supersedes)."""
        o = self.options
        with_retries(f"writing {self.uri_of(rel)}", lambda: self._write_bytes(rel, data),
                     o.upload_retries if retry else 0, o.upload_backoff_s)

    def _write_bytes(self, rel: str, data: bytes) -> None:
        target = self.path(rel)
        self.fs.create_dir(posixpath.dirname(target), recursive=True)
        if not self._local:
            # An object store PUT becomes visible whole at close.
            with self.fs.open_output_stream(target) as f:
                f.write(data)
            return
        tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        self.fs.move(tmp, target)

    def upload_file(self, local_path: str, rel: str, *, retry: bool = True, chunk: int = 1 << 20) -> None:
        """A local file to <run>/<rel>, streamed `chunk` bytes at a time (a task's log can be gigabytes: never
        read whole); readers see the old content or the new one, as with write_bytes."""
        o = self.options
        with_retries(f"uploading {self.uri_of(rel)}", lambda: self._upload_file(local_path, rel, chunk),
                     o.upload_retries if retry else 0, o.upload_backoff_s)

    def _upload_file(self, local_path: str, rel: str, chunk: int) -> None:
        target = self.path(rel)
        self.fs.create_dir(posixpath.dirname(target), recursive=True)
        out = target if not self._local else f"{target}.tmp-{uuid.uuid4().hex[:8]}"
        with open(local_path, "rb") as src, self.fs.open_output_stream(out) as dst:
            while block := src.read(chunk):
                dst.write(block)
        if out != target:
            self.fs.move(out, target)

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode())

    def write_json(self, rel: str, obj: Any) -> None:
        self.write_text(rel, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")

    def read_text(self, rel: str) -> str:
        with self.fs.open_input_stream(self.path(rel)) as f:
            return f.read().decode()

    def read_json(self, rel: str) -> Any:
        return json.loads(self.read_text(rel))

    def write_table(self, rel: str, table: pa.Table, *, retry: bool = True) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self.write_bytes(rel, sink.getvalue().to_pybytes(), retry=retry)

    def read_table(self, rel: str) -> pa.Table:
        return pq.read_table(self.path(rel), filesystem=self.fs)

    # -- metrics: appended in parts while the run goes, compacted into metrics.parquet at its end ---------
    def _metrics_parts(self) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.path(METRICS_PARTS_DIR), allow_not_found=True))
        return sorted(i.base_name for i in infos if i.base_name.endswith(".parquet"))

    def append_metrics(self, table: pa.Table, part: str, *, retry: bool = True) -> None:
        """The rows since the last flush as one more part: a flush costs what it adds, not the whole run."""
        self.write_table(f"{METRICS_PARTS_DIR}/{part}.parquet", table, retry=retry)

    def write_metrics(self, table: pa.Table, *, retry: bool = True) -> None:
        """metrics.parquet, the whole table (it includes every part there now, and says so), then the parts go.
        A reader that finds both skips the parts metrics.parquet names."""
        parts = self._metrics_parts()
        meta = {**(table.schema.metadata or {}), METRICS_PARTS_KEY: json.dumps(parts).encode()}
        self.write_table(METRICS_FILE, table.replace_schema_metadata(meta), retry=retry)
        for name in parts:
            try:
                self.fs.delete_file(self.path(METRICS_PARTS_DIR, name))
            except OSError as e:  # metrics.parquet names it: readers skip it
                log.debug("metrics part %s not removed: %s", name, e)

    def has_metrics(self) -> bool:
        return self.exists(METRICS_FILE) or bool(self._metrics_parts())

    def read_metrics(self) -> pa.Table:
        """metrics.parquet plus the parts it does not include (a run still going, or a driver that died)."""
        tables, included = [], set()
        if self.exists(METRICS_FILE):
            table = self.read_table(METRICS_FILE)
            included = set(json.loads((table.schema.metadata or {}).get(METRICS_PARTS_KEY, b"[]")))
            tables.append(table.replace_schema_metadata(None))
        for name in self._metrics_parts():
            if name not in included:
                tables.append(self.read_table(f"{METRICS_PARTS_DIR}/{name}"))
        return metrics.concat(tables)

    # -- is this run directory shared with every node? -------------------------------------------
    def write_storage_marker(self) -> str:
        """Written by the driver before any task starts; returns the marker's name."""
        name = f"{STORAGE_CHECK_PREFIX}{uuid.uuid4().hex[:12]}"
        self.write_text(name, "raytf: every task must see this file\n")
        return name

    def remove_storage_marker(self, name: str) -> None:
        try:
            self.fs.delete_file(self.path(name))
        except OSError as e:
            log.debug("storage marker: %s", e)

    def can_see(self, marker: str) -> bool:
        try:
            return self.exists(marker)
        except OSError:
            return False

    # -- checkpoints -------------------------------------------------------------------------
    def _checkpoint_dirs(self) -> tuple[set[str], set[str]]:
        """The directories under checkpoints/, and those with a commit marker."""
        base = self.path(CHECKPOINTS_DIR)
        infos = self.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True, recursive=True))
        dirs, committed = set(), set()
        for info in infos:
            rel = posixpath.relpath(info.path, base)
            parts = rel.split("/")
            dirs.add(parts[0])
            if len(parts) == 2 and parts[1] == checkpoints.COMMIT_MARKER:
                committed.add(parts[0])
        return dirs, committed

    def list_checkpoints(self) -> list[checkpoints.CheckpointEntry]:
        return checkpoints.entries_from_listing(*self._checkpoint_dirs())

    def latest_checkpoint(self) -> checkpoints.CheckpointEntry | None:
        return checkpoints.latest_committed(self.list_checkpoints())

    def next_checkpoint_seq(self) -> int:
        """The lineage number the next checkpoint of this run takes (checkpoints._NAME)."""
        o = self.options
        return with_retries("listing the checkpoints", lambda: checkpoints.next_seq(self._checkpoint_dirs()[0]),
                            o.upload_retries, o.upload_backoff_s)

    def upload_checkpoint(self, local_dir: str, epoch: int, step: int, meta: dict[str, Any],
                          before_commit: Callable[[], None] | None = None, seq: int = 0) -> str:
        """Copy a finished local checkpoint up (retried), then commit it by writing the marker last."""
        o = self.options
        name = checkpoints.checkpoint_name(epoch, step, seq)
        # The same name again (a script's final sync, Keras step checkpoints after a mid-epoch resume): the
        # committed copy stays until its replacement is committed, in a staging directory that resume finds.
        replacing = self.exists(posixpath.join(CHECKPOINTS_DIR, name, checkpoints.COMMIT_MARKER))
        target = name + checkpoints.STAGING_SUFFIX if replacing else name
        files = _manifest(local_dir)  # the files as they are uploaded (a finished checkpoint, or a snapshot)
        with_retries(f"uploading checkpoint {name}", lambda: self._copy_up(local_dir, target), o.upload_retries,
                     o.upload_backoff_s)
        if before_commit is not None:
            before_commit()
        self.write_json(posixpath.join(CHECKPOINTS_DIR, target, checkpoints.COMMIT_MARKER),
                        {"epoch": epoch, "step": step, "seq": seq, **meta,
                         checkpoints.MANIFEST_KEY: files})
        if replacing:
            with_retries(f"replacing checkpoint {name}", lambda: self._promote(target, name), o.upload_retries,
                         o.upload_backoff_s)
        return self.uri_of(CHECKPOINTS_DIR, name)

    def verify_checkpoint(self, entry: checkpoints.CheckpointEntry) -> str | None:
        """What is wrong with a committed checkpoint's files against its marker's manifest (names, sizes, then
        each file's SHA-256, read through once), or None. Storage errors propagate (OSError)."""
        base = self.path(CHECKPOINTS_DIR, entry.dir)
        try:
            marker = json.loads(self.read_text(posixpath.join(CHECKPOINTS_DIR, entry.dir, checkpoints.COMMIT_MARKER)))
        except (ValueError, UnicodeDecodeError):
            return "its commit marker is not JSON"
        manifest = marker.get(checkpoints.MANIFEST_KEY) if isinstance(marker, dict) else None
        found = {posixpath.relpath(i.path, base): i.size
                 for i in self.fs.get_file_info(pafs.FileSelector(base, recursive=True))
                 if i.type == pafs.FileType.File and posixpath.relpath(i.path, base) != checkpoints.COMMIT_MARKER}
        if problem := checkpoints.manifest_problem(manifest, found):
            return problem
        for rel in sorted(found):
            with self.fs.open_input_stream(posixpath.join(base, rel)) as f:
                if problem := checkpoints.digest_problem(manifest, rel, _sha256(f)):
                    return problem
        return None

    def trusted_checkpoint(self, verified: set[str]) -> tuple[checkpoints.CheckpointEntry | None,
                                                              list[tuple[checkpoints.CheckpointEntry, str]]]:
        """The newest committed checkpoint whose files match its manifest, and the newer ones refused (with
        why). `verified` (directories already verified by this process) is skipped and added to."""
        refused = []
        for entry in sorted((e for e in self.list_checkpoints() if e.committed), reverse=True):
            if entry.dir not in verified:
                o = self.options
                problem = with_retries(f"verifying checkpoint {entry.name}", lambda e=entry: self.verify_checkpoint(e),
                                       o.upload_retries, o.upload_backoff_s)
                if problem is not None:
                    refused.append((entry, problem))
                    continue
                verified.add(entry.dir)
            return entry, refused
        return None, refused

    def _copy_up(self, local_dir: str, name: str) -> None:
        # A partial copy from an earlier, interrupted try or attempt is started over.
        self._put_dir(local_dir, self.path(CHECKPOINTS_DIR, name), replace=True)

    def _promote(self, staging: str, name: str) -> None:
        """The committed `staging` copy takes `name`'s place: the old copy goes, then the files are copied
        over with the marker last (so `name` is never committed half-copied), then the staging goes. Until
        `name` is committed again, listing finds the staging copy."""
        src, dst = self.path(CHECKPOINTS_DIR, staging), self.path(CHECKPOINTS_DIR, name)
        if self.fs.get_file_info(dst).type != pafs.FileType.NotFound:
            self.fs.delete_dir(dst)
        files = [i for i in self.fs.get_file_info(pafs.FileSelector(src, recursive=True))
                 if i.type == pafs.FileType.File]
        for i in sorted(files, key=lambda i: i.base_name == checkpoints.COMMIT_MARKER):
            out = posixpath.join(dst, posixpath.relpath(i.path, src))
            self.fs.create_dir(posixpath.dirname(out), recursive=True)
            self.fs.copy_file(i.path, out)
        self.fs.delete_dir(src)

    def _put_dir(self, local_dir: str, dest: str, *, replace: bool) -> None:
        """One copy of a local directory's files to `dest`; with `replace`, whatever was there goes first."""
        if replace and self.fs.get_file_info(dest).type != pafs.FileType.NotFound:
            self.fs.delete_dir(dest)
        self.fs.create_dir(dest, recursive=True)
        pafs.copy_files(local_dir, dest, source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=self.fs, use_threads=True)
        # pyarrow's copy_files can return without an error when a file's upload failed (26.0.1 on S3 with connections
        # reset: "Error ignored when destroying file of type ObjectOutputStream"; found by tests/ray/test_s3_faults.py,
        # reproduced without raytf in 4 copies of 60): a file missing or short there is an OSError, which the caller's
        # retries copy again, and a checkpoint's marker never commits it half-copied.
        want = {os.path.relpath(os.path.join(root, n), local_dir).replace(os.sep, "/"): os.path.getsize(
            os.path.join(root, n)) for root, _, names in os.walk(local_dir) for n in names}
        listing = self.fs.get_file_info(pafs.FileSelector(dest, recursive=True))
        found = {posixpath.relpath(i.path, dest): i.size for i in listing if i.type == pafs.FileType.File}
        if short := sorted(rel for rel, size in want.items() if found.get(rel) != size):
            raise OSError(f"copying to {dest}: {len(short)} file(s) missing or short after the copy: "
                          f"{', '.join(short[:3])}")

    def upload_model(self, local_dir: str) -> str:
        """The exported SavedModel to <run>/model/ (replacing an older export), marker written last."""
        o = self.options
        with_retries("uploading the model", lambda: self._put_dir(local_dir, self.path(MODEL_DIR), replace=True),
                     o.upload_retries, o.upload_backoff_s)
        self.write_json(posixpath.join(MODEL_DIR, checkpoints.COMMIT_MARKER), {"format": "tf_keras SavedModel"})
        return self.uri_of(MODEL_DIR)

    def upload_dir(self, local_dir: str, rel: str) -> str:
        """Copy a local directory's files up to <run>/<rel>/ (retried; files already there are replaced)."""
        o = self.options
        with_retries(f"uploading {self.uri_of(rel)}", lambda: self._put_dir(local_dir, self.path(rel), replace=False),
                     o.upload_retries, o.upload_backoff_s)
        return self.uri_of(rel)

    def download_dir(self, rel: str, local_dir: str) -> str:
        os.makedirs(local_dir, exist_ok=True)
        pafs.copy_files(self.path(rel), local_dir, source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())
        return local_dir

    def download_checkpoint(self, entry: checkpoints.CheckpointEntry, local_dir: str) -> str:
        """Copy a committed checkpoint into local_dir; returns the tf.train.Checkpoint prefix."""
        os.makedirs(local_dir, exist_ok=True)
        pafs.copy_files(self.path(CHECKPOINTS_DIR, entry.dir), local_dir, source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())
        return os.path.join(local_dir, checkpoints.TF_PREFIX)

    def prune_checkpoints(self, keep_last: int) -> list[str]:
        """Called by the one uploader after an upload (none is in flight): old checkpoints, and staging
        directories no longer needed."""
        dirs, committed = self._checkpoint_dirs()
        doomed = [e.dir for e in checkpoints.to_prune(checkpoints.entries_from_listing(dirs, committed), keep_last)]
        doomed += checkpoints.stale_staging(dirs, committed)
        for d in doomed:
            try:
                self.fs.delete_dir(self.path(CHECKPOINTS_DIR, d))
            except OSError as err:  # pruning is housekeeping: never fail a run for it
                log.warning("could not prune checkpoint %s: %s", d, err)
        return doomed
