"""Script mode's Ray Data input, the host's side: `DataFeed` serves a task's dataset shares (ray.data.DataIterator)
to its script's child process, which is not a Ray worker and cannot iterate them itself (`raytf.dataset`, in
`script/data.py`, is the reading end).

A Unix socket in the task's scratch directory ($RAYTF_DATA_SOCKET); a thread per connection, so a Keras fit's
train and validation datasets can be read at once. One connection is one request, a JSON line:

- {"op": "schema", "name": ...}: the dataset's columns and types (no epoch started; Ray Data may run the pipeline to
  its first block when the schema is not known before);
- {"op": "epoch", "name": ..., "batch_size": n, "columns": [...]}: one pass over this task's share,
  `iter_batches(batch_size=n)` rows at a time;

answered by an Arrow IPC stream that always ends with a zero-row batch whose custom metadata says how: {raytf:
end}, or {raytf: error, kind, message} (kind `missing`: no such dataset). A stream that stops without it was cut.
Ray's tensor columns (its ArrowTensorType extensions, Arrow's fixed_shape_tensor) go as nested fixed_size_lists,
which any pyarrow reads without Ray's extension types registered.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any

from raytf._core import data

log = logging.getLogger(__name__)

SOCKET_ENV = "RAYTF_DATA_SOCKET"  # where the child connects
NAMES_ENV = "RAYTF_DATASETS"  # the names of the datasets given, comma-separated
MARKER = "raytf"  # the last batch's custom metadata key, its value END or ERROR
END, ERROR = "end", "error"
MISSING = "missing"  # an ERROR's kind: no dataset of that name
_MAX_REQUEST = 64 * 1024
_SUN_PATH = 100  # AF_UNIX paths hold 104 (macOS) to 108 (Linux) bytes


def child_vars(path: str, names) -> dict[str, str]:
    """The script's environment for its datasets: where to read ($RAYTF_DATA_SOCKET), what ($RAYTF_DATASETS)."""
    return {SOCKET_ENV: path, NAMES_ENV: ",".join(names)}


class Refused(Exception):
    """A request the feed answers with an error: `kind` (MISSING, or "error") and a one-line message."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


def missing(name: str, given) -> str:
    """_core.data.missing, worded for a script."""
    return data.missing(name, given).replace("ctx.dataset(", "raytf.dataset(", 1)


def plain_type(t):
    """An Arrow type as it goes on the wire: a fixed-shape tensor extension as nested fixed_size_lists of its
    values; anything else as it is. Raises Refused for tensors of varying shapes."""
    import pyarrow as pa

    if not isinstance(t, pa.BaseExtensionType):
        return t
    shape = getattr(t, "shape", None)
    if shape is None or any(d is None for d in shape):
        raise Refused(f"a column of type {t} (tensors of varying shapes, or an extension type) cannot be sent to the "
                      "script. Fix: give its rows one shape (ds.map_batches), or leave the column out")
    out = t.value_type
    for d in reversed(shape):
        out = pa.list_(out, int(d))
    return out


def plain_batch(batch):
    """`batch` with its tensor-extension columns as nested fixed_size_lists (plain_type)."""
    import numpy as np
    import pyarrow as pa

    arrays = []
    for array in batch.columns:
        if isinstance(array.type, pa.BaseExtensionType):
            plain = plain_type(array.type)
            tensors = array.to_numpy_ndarray() if hasattr(array, "to_numpy_ndarray") else array.to_numpy()
            array = pa.array(np.ascontiguousarray(tensors).reshape(-1))
            for d in reversed(tensors.shape[1:]):
                array = pa.FixedSizeListArray.from_arrays(array, int(d))
            if array.type != plain:
                array = array.cast(plain)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def schema_of(iterator) -> Any:
    """The dataset's columns as a pyarrow schema (plain types), from the iterator's schema() (ray.data's Schema, or
    a pyarrow one): no epoch started (Ray Data may run the pipeline to its first block if it does not know the
    schema before). A column that cannot be sent gets the null type, its own type in the
    field's metadata, so that only a script asking for it fails."""
    import pyarrow as pa

    schema = iterator.schema()
    if schema is None:
        raise Refused("its schema is not known (a dataset without rows?)")
    fields = []
    for name, t in zip(schema.names, schema.types):
        try:
            if not isinstance(t, pa.DataType):
                raise Refused(f"{t}")
            fields.append(pa.field(name, plain_type(t)))
        except Refused:
            fields.append(pa.field(name, pa.null(), metadata={"type": str(t)}))
    return pa.schema(fields)


def socket_path(scratch: str) -> str:
    """`<scratch>/data.sock`, or a socket of its own in the temporary directory when that path is too long for
    AF_UNIX (a long run.name). In a task's process that is its own scratch directory (scratch.own_tempdir: short, and
    swept with the process, so a killed task leaves no socket in /tmp)."""
    path = os.path.join(scratch, "data.sock")
    if len(os.fsencode(path)) < _SUN_PATH:
        return path
    return os.path.join(tempfile.gettempdir(), f"raytf-data-{os.getpid()}-{secrets.token_hex(4)}.sock")


class _Reply:
    """One connection's answer: an Arrow IPC stream, opened with the first batch's schema, closed by a marker."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self.writer = None
        self.schema = None

    def open(self, schema) -> None:
        import pyarrow as pa

        self.schema = schema
        self.writer = pa.ipc.new_stream(self.sink, schema)

    def batch(self, batch) -> None:
        if self.writer is None:
            self.open(batch.schema)
        elif batch.schema != self.schema:  # a block that typed a column differently (int64 for double, say)
            batch = batch.cast(self.schema)
        self.writer.write_batch(batch)

    def end(self, how: str, **detail: str) -> None:
        """The marker batch (END, or ERROR with kind= and message=), and the stream's end."""
        import pyarrow as pa

        if self.writer is None:
            self.open(pa.schema([]))
        self.writer.write_batch(pa.RecordBatch.from_pylist([], schema=self.schema),
                                custom_metadata={MARKER: how, **detail})
        self.writer.close()
        self.sink.flush()


class DataFeed:
    """Serves `iterators` ({name: ray.data.DataIterator}, this task's shares) on a Unix socket at `path` from
    `start()` to `close()`; also a context manager."""

    def __init__(self, iterators: Mapping[str, Any], path: str) -> None:
        self.iterators = dict(iterators)
        self.path = path
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._lock = threading.Lock()
        self._open: dict[threading.Thread, socket.socket] = {}
        self._closed = False

    def env(self) -> dict[str, str]:
        """What tells the child where to read (child_vars)."""
        return child_vars(self.path, self.iterators)

    def start(self) -> DataFeed:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.path)
            os.chmod(self.path, 0o600)  # this user's processes only (the scratch directory is 0700 already)
            listener.listen(16)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept, name="raytf-data-feed", daemon=True)
        self._acceptor.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, cut the connections still open (a thread writing to one returns) and wait for their
        threads (at most `timeout`: one waiting on Ray Data for its next batch ends when that comes), then remove
        the socket file."""
        with self._lock:
            self._closed = True
            conns = list(self._open.items())
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
            except OSError:
                pass
            if self._acceptor is not None:
                self._acceptor.join(timeout)
            self._listener.close()
            self._listener = None
        for _, conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # (closed by its own thread: no fd closed under it)
            except OSError:
                pass
        for thread, _ in conns:
            thread.join(timeout)
            if thread.is_alive():
                log.warning("data feed: %s still waits for Ray Data after the script ended", thread.name)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> DataFeed:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self) -> None:
        served = 0
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError as e:
                with self._lock:
                    if self._closed:  # shut down by close()
                        return
                log.warning("data feed: accept failed (%s); still serving", e)  # EMFILE, ECONNABORTED, ...
                time.sleep(0.1)  # a back-off: EMFILE would fail every accept at once until an fd is freed
                continue
            served += 1
            thread = threading.Thread(target=self._serve, args=(conn,), name=f"raytf-data-feed-{served}", daemon=True)
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._open[thread] = conn
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        reply = _Reply(conn.makefile("wb"))
        name = None
        try:
            try:
                request = self._request(conn)
                name = request["name"]
                if request.get("op") == "schema":
                    reply.open(schema_of(self.iterators[name]))
                else:
                    self._epoch(self.iterators[name], request, reply)
                reply.end(END)
            except Refused as e:
                reply.end(ERROR, kind=e.kind, message=str(e) if name is None or e.kind == MISSING
                          else f"raytf.dataset({name!r}): {e}")
            except (BrokenPipeError, ConnectionResetError):
                raise
            except Exception as e:
                log.warning("data feed: %r failed", name, exc_info=True)
                text = str(e).strip().splitlines()
                reply.end(ERROR, kind="error", message=f"raytf.dataset({name!r}): reading this task's "
                          f"share failed: {type(e).__name__}: {text[0] if text else ''} (the task's log has the rest)")
        except OSError as e:  # the script stopped reading (its iterator dropped, or it ended)
            log.debug("data feed: %r: the script went away: %s", name, e)
        finally:
            try:
                reply.sink.close()
            except OSError:
                pass
            conn.close()
            with self._lock:
                self._open.pop(threading.current_thread(), None)

    def _request(self, conn: socket.socket) -> dict[str, Any]:
        with conn.makefile("rb") as f:
            raw = f.readline(_MAX_REQUEST)
        try:
            request = json.loads(raw)
            name = request["name"]
        except (ValueError, KeyError, TypeError):
            raise Refused(f"unreadable request {raw[:200]!r}") from None
        if name not in self.iterators:
            raise Refused(missing(name, self.iterators), MISSING)
        return request

    @staticmethod
    def _epoch(iterator, request: dict[str, Any], reply: _Reply) -> None:
        """One pass over the share: batch_size rows a batch (the last one may hold fewer), the columns asked for."""
        columns = request.get("columns") or None
        try:
            batch_size = int(request["batch_size"])
        except (KeyError, TypeError, ValueError):
            raise Refused(f"batch_size {request.get('batch_size')!r} is not a number") from None
        batches = iter(iterator.iter_batches(batch_size=batch_size, batch_format="pyarrow"))
        try:
            for table in batches:
                if columns:
                    absent = [c for c in columns if c not in table.column_names]
                    if absent:
                        raise Refused(f"no column {absent[0]!r} (columns: {', '.join(table.column_names)})")
                    table = table.select(columns)
                if table.num_rows:
                    for batch in table.combine_chunks().to_batches():  # one batch: the rows iter_batches gave
                        reply.batch(plain_batch(batch))
        finally:
            close = getattr(batches, "close", None)
            if close is not None:  # Ray Data stops this pass's executor now, not when the generator is collected
                close()
