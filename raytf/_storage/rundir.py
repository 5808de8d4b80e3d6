"""`RunDir`: one run's directory on shared storage, its paths and plain files (through pyarrow.fs), every access
through the one retry rule (`RunDir.retried`: _storage/retry.py)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import posixpath
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from raytf._s3 import s3_credentials, s3_filesystem, with_query_options
from raytf._storage.layout import STORAGE_CHECK_PREFIX, StorageMarker, seen_here
from raytf._storage.retry import ANSWERS, WRITE_ANSWERS, with_retries
from raytf.config import StorageConfig
from raytf.config.redact import redact_storage_path, redact_text, without_userinfo
from raytf.errors import StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")


def resolve(path: str, options: StorageConfig | None = None) -> tuple[pafs.FileSystem, str, str]:
    """(filesystem, path inside it, canonical URI) for a local path or a pyarrow URI."""
    if "://" not in path:
        local = os.path.abspath(os.path.expanduser(path))
        return pafs.LocalFileSystem(), seen_here(local), local
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


def strict_json(obj: Any) -> Any:
    """`obj` with every float that is not finite as its string ("inf", "-inf", "nan"): JSON has no such number."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


class RunDir:
    """`<storage.path>/<run.name>/`: config, result, logs, and (`checkpoints`, `metrics`) the run's checkpoints and
    metrics table. Every access is retried by one rule (`retried`: storage.upload_retries with back-off)."""

    def __init__(self, storage: str | StorageConfig, run_name: str) -> None:
        from raytf._storage.checkpoints import CheckpointStore
        from raytf._storage.metrics import MetricsStore

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
        self.checkpoints = CheckpointStore(self)
        self.metrics = MetricsStore(self)

    @classmethod
    def at(cls, run_path: str, options: StorageConfig | None = None) -> RunDir:
        """The run directory at `run_path` (a path or URI, S3 options in its query kept), opened with `options`."""
        base, _, query = run_path.partition("?")
        parent, name = posixpath.split(base.rstrip("/"))
        parent += f"?{query}" if query else ""
        return cls(dataclasses.replace(options, path=parent) if options else parent, name)

    def __reduce__(self):
        # Filesystem handles are rebuilt from the URI on the other side, with that node's credentials (its
        # environment, or storage.credentials_file read there): pyarrow's S3FileSystem pickles its keys, and
        # storage keys given in this process never go into task arguments either.
        return (RunDir, (dataclasses.replace(self.options, access_key=None, secret_key=None), self.run_name))

    @property
    def local(self) -> bool:
        """A directory of this node's filesystem (written in place), not an object store's."""
        return self._local

    def path(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts) if any(parts) else self.root

    def uri_of(self, *parts: str) -> str:
        return posixpath.join(self.uri, *parts) if any(parts) else self.uri

    # -- the retry rule ----------------------------------------------------------------------
    def retried(self, what: str, fn: Callable[[], T], *, retry: bool = True, writes: bool = False) -> T:
        """fn, retried storage.upload_retries times with back-off from storage.upload_backoff_s (once with
        `retry` false: a periodic write the next one supersedes, housekeeping); `writes`: a refusal is retried too
        (WRITE_ANSWERS)."""
        o = self.options
        return with_retries(what, fn, o.upload_retries if retry else 0, o.upload_backoff_s,
                            WRITE_ANSWERS if writes else ANSWERS)

    # -- plain files -------------------------------------------------------------------------
    def makedirs(self, rel: str = "") -> None:
        try:
            self.retried(f"creating {self.uri_of(rel)}", lambda: self.fs.create_dir(self.path(rel), recursive=True),
                         writes=True)
        except (OSError, StorageError) as e:
            raise StorageError(f"cannot create {self.uri_of(rel)} (storage.path={self.storage_path!r}): {e}") from None

    def kind(self, rel: str = "") -> pafs.FileType:
        """What is at `rel`: pafs.FileType.File, Directory or NotFound."""
        return self.retried(f"looking at {self.uri_of(rel)}", lambda: self.fs.get_file_info(self.path(rel)).type)

    def exists(self, rel: str) -> bool:
        return self.kind(rel) != pafs.FileType.NotFound

    def is_file(self, rel: str = "") -> bool:
        return self.kind(rel) == pafs.FileType.File

    def subdirs(self, rel: str = "") -> list[str]:
        """The names of the directories right under `rel`, sorted."""
        return sorted(i.base_name for i in self.listing(rel) if i.type == pafs.FileType.Directory)

    def listing(self, rel: str = "", *, recursive: bool = False) -> list[pafs.FileInfo]:
        """What is under `rel` (nothing when it is not there)."""
        return self.retried(f"listing {self.uri_of(rel)}", lambda: self.fs.get_file_info(
            pafs.FileSelector(self.path(rel), allow_not_found=True, recursive=recursive)))

    def write_bytes(self, rel: str, data: bytes, *, retry: bool = True) -> None:
        """Write a whole file so readers see the old content or the new one, never a part; retried with
        back-off unless `retry` is false (a periodic write that the next one supersedes)."""
        self.retried(f"writing {self.uri_of(rel)}", lambda: self._write_bytes(rel, data), retry=retry, writes=True)

    def _write_bytes(self, rel: str, data: bytes) -> None:
        target = self.path(rel)
        self.fs.create_dir(posixpath.dirname(target), recursive=True)
        if not self._local:
            # An object store PUT becomes visible whole at close.
            with self.fs.open_output_stream(target) as f:
                f.write(data)
            return
        tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            with self.fs.open_output_stream(tmp) as f:
                f.write(data)
            self.fs.move(tmp, target)
        except OSError:  # (a full disk: no partial file left behind)
            _remove_quietly(self.fs, tmp)
            raise

    def upload_file(self, local_path: str, rel: str, *, retry: bool = True, chunk: int = 1 << 20) -> None:
        """A local file to <run>/<rel>, streamed `chunk` bytes at a time (a task's log can be gigabytes: never
        read whole); readers see the old content or the new one, as with write_bytes."""
        self.retried(f"uploading {self.uri_of(rel)}", lambda: self._upload_file(local_path, rel, chunk), retry=retry,
                     writes=True)

    def _upload_file(self, local_path: str, rel: str, chunk: int) -> None:
        target = self.path(rel)
        self.fs.create_dir(posixpath.dirname(target), recursive=True)
        out = target if not self._local else f"{target}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            with open(local_path, "rb") as src, self.fs.open_output_stream(out) as dst:
                while block := src.read(chunk):
                    dst.write(block)
            if out != target:
                self.fs.move(out, target)
        except OSError:
            if out != target:
                _remove_quietly(self.fs, out)
            raise

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode())

    def write_json(self, rel: str, obj: Any) -> None:
        """`obj` as strict JSON (RFC 8259: a float that is not finite is written as the string "inf", "-inf" or
        "nan", never as Python's Infinity/NaN, which other readers refuse: raytf issue 71)."""
        self.write_text(rel, json.dumps(strict_json(obj), indent=2, sort_keys=True, default=str,
                                        allow_nan=False) + "\n")

    def read_bytes(self, rel: str) -> bytes:
        def read() -> bytes:
            with self.fs.open_input_stream(self.path(rel)) as f:
                return f.read()

        return self.retried(f"reading {self.uri_of(rel)}", read)

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode()

    def read_json(self, rel: str) -> Any:
        return json.loads(self.read_text(rel))

    def write_table(self, rel: str, table: pa.Table, *, retry: bool = True) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self.write_bytes(rel, sink.getvalue().to_pybytes(), retry=retry)

    def read_table(self, rel: str) -> pa.Table:
        return self.retried(f"reading {self.uri_of(rel)}", lambda: pq.read_table(self.path(rel), filesystem=self.fs))

    def remove(self, rel: str) -> bool:
        """Housekeeping: one try, never an error (whether it went)."""
        try:
            self.retried(f"removing {self.uri_of(rel)}", lambda: self.fs.delete_file(self.path(rel)), retry=False)
            return True
        except (OSError, StorageError) as e:
            log.debug("not removed: %s", e)
            return False

    def put_dir(self, local_dir: str, dest: str, *, replace: bool) -> None:
        """One copy (not retried: a caller's retry copies again) of a local directory's files to `dest`, a path of
        this filesystem; with `replace`, whatever was there goes first."""
        if replace and self.fs.get_file_info(dest).type != pafs.FileType.NotFound:
            self.fs.delete_dir(dest)
        self.fs.create_dir(dest, recursive=True)
        pafs.copy_files(local_dir, dest, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs,
                        use_threads=True)
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

    def upload_dir(self, local_dir: str, rel: str, *, retry: bool = True) -> str:
        """Copy a local directory's files up to <run>/<rel>/ (files already there are replaced)."""
        self.retried(f"uploading {self.uri_of(rel)}", lambda: self.put_dir(local_dir, self.path(rel), replace=False),
                     retry=retry, writes=True)
        return self.uri_of(rel)

    def download_dir(self, rel: str, local_dir: str) -> str:
        os.makedirs(local_dir, exist_ok=True)
        self.retried(f"downloading {self.uri_of(rel)}", lambda: pafs.copy_files(
            self.path(rel), local_dir, source_filesystem=self.fs, destination_filesystem=pafs.LocalFileSystem()))
        return local_dir

    def staged(self, rel: str, *, is_dir: bool, prefix: str):
        """`rel` written on this node while the run goes (a task's log, TensorBoard's files): see staged.Staged."""
        from raytf._storage.staged import Staged

        return Staged(self, rel, is_dir=is_dir, prefix=prefix)

    # -- is this run directory shared with every node? -------------------------------------------
    def write_storage_marker(self) -> str:
        """Written by the driver before any task starts; returns the marker's name."""
        name = f"{STORAGE_CHECK_PREFIX}{uuid.uuid4().hex[:12]}"
        self.write_text(name, "raytf: every task must see this file\n")
        return name

    def remove_storage_marker(self, name: str) -> None:
        self.remove(name)

    def marker(self, name: str) -> StorageMarker:
        """The marker `name` as a task checks it (group.addresses): a local path's without pyarrow; a URI's
        (file:// too) through this run directory, opened on the task's node."""
        if "://" in self.storage_path:
            return StorageMarker(name, run_dir=self)
        return StorageMarker(name, local_path=self.uri_of(name))

    def can_see(self, marker: str) -> bool:
        try:
            return self.exists(marker)
        except (OSError, StorageError):
            return False


def _remove_quietly(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except OSError:
        pass
