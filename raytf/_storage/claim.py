"""One writer per run directory (raytf issue 71): a launch claims `<run>/` before it writes there, and a second
launch of the same run.name while the first lives is refused in one line naming it (two terminals, a retried job
submission: both trained into one directory, and the first one's metrics were deleted by the second's end).

On a filesystem (local, or mounted on every node) the claim is an exclusive flock on `<run>/.launch.lock`, held by
the launching process for the run's life: the kernel drops it when that process ends in any way, a SIGKILL
included, so a dead launch's claim is free at once and two launches can never both hold it. `.launch.json` beside
it says who holds it (host, pid, since), for the refusal's line and the takeover's. On an object store there is no
lock: the claim is that file, refreshed every REFRESH_S by its launch, and taken over once it is older than STALE_S
or its process is gone from this host; written, then read back, so that of two launches at the same moment the one
whose write lost is refused. (Two writes within one read's time can still both read their own: S3 offers no
exclusive create through pyarrow; the refresh then finds the other's claim and says so.)
"""

from __future__ import annotations

import datetime as _dt
import errno
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from raytf.errors import ConfigError

if TYPE_CHECKING:
    from raytf._storage.rundir import RunDir

log = logging.getLogger("raytf")

CLAIM_FILE = ".launch.json"
LOCK_FILE = ".launch.lock"
REFRESH_S = 10.0
STALE_S = 60.0


@dataclass(frozen=True)
class Claimant:
    """Who holds a run directory: its launch's host, process and start (epoch seconds), its last refresh."""

    host: str
    pid: int
    started_at: float
    refreshed_at: float
    launch_id: str

    def describe(self) -> str:
        since = _dt.datetime.fromtimestamp(self.started_at).isoformat(sep=" ", timespec="seconds")
        return f"host {self.host}, pid {self.pid}, since {since}"

    @classmethod
    def of(cls, data: object) -> Claimant | None:
        try:
            return cls(str(data["host"]), int(data["pid"]), float(data["started_at"]),  # type: ignore[index]
                       float(data["refreshed_at"]), str(data["launch_id"]))  # type: ignore[index]
        except (KeyError, TypeError, ValueError):
            return None  # (a file of another version, or torn: nobody's claim)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (another user's process: alive)
        return True
    return True


def gone(holder: Claimant, now: float, host: str, alive: Callable[[int], bool] = pid_alive) -> str | None:
    """Why an object store's claim by `holder` no longer holds (its process gone from this host, or not refreshed
    for STALE_S), or None while it does. Pure but for `alive`."""
    if holder.host == host and not alive(holder.pid):
        return f"its process {holder.pid} is gone"
    if now - holder.refreshed_at > STALE_S:
        return f"not refreshed for {now - holder.refreshed_at:.0f}s"
    return None


def refusal(run_dir: RunDir, holder: Claimant) -> ConfigError:
    return ConfigError(
        f"run.name ({run_dir.run_name!r}): another launch is running it ({holder.describe()}) in {run_dir.uri}: "
        f"two launches would write one run directory. Fix: wait for it to end (or stop it), or launch under "
        f"another name (run.name={run_dir.run_name}-2)")


def _lock_now(fd: int, tries: int = 4, apart_s: float = 0.05) -> bool:
    """Whether this process now holds the exclusive lock on `fd`. `raytf runs` takes a shared one for an instant to
    see whether a launch holds it (launch_alive): a few tries, `apart_s` apart, ride that out."""
    import fcntl

    for n in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            if n + 1 < tries:
                time.sleep(apart_s)  # (a reader's lock lasts one call; a launch's, its run: retried a few times)
    return False


class Claim:
    """This launch's claim on `run_dir`: `take()` before anything is written there, `release()` at the end."""

    def __init__(self, run_dir: RunDir, clock: Callable[[], float] = time.time) -> None:
        self.run_dir, self._clock = run_dir, clock
        now = clock()
        self.me = Claimant(socket.gethostname(), os.getpid(), now, now, secrets.token_hex(8))
        self._lock_fd: int | None = None
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None

    def take(self) -> None:
        """Claim the run directory, or raise a ConfigError naming the launch that holds it. A claim its launch
        left (a killed driver) is taken over, with a line saying so."""
        self.run_dir.makedirs()
        before = self._read()
        if self.run_dir.local:
            self._lock(before)
        else:
            self._claim_object(before)
        if before is not None and before.launch_id != self.me.launch_id:
            log.warning("run %s: taking over the claim of a launch that is gone (%s)", self.run_dir.run_name,
                        before.describe())

    def _read(self) -> Claimant | None:
        if not self.run_dir.exists(CLAIM_FILE):
            return None
        try:
            return Claimant.of(self.run_dir.read_json(CLAIM_FILE))
        except (OSError, ValueError):
            return None

    def _write(self, who: Claimant) -> None:
        self.run_dir.write_json(CLAIM_FILE, asdict(who))

    def _lock(self, before: Claimant | None) -> None:
        path = self.run_dir.path(LOCK_FILE)
        for _ in range(10):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if not _lock_now(fd):
                os.close(fd)
                holder = self._read() or before
                raise refusal(self.run_dir, holder or Claimant("another host", 0, 0.0, 0.0, ""))
            # A launch's release removes the file (then closes it): a lock taken on a file since removed is no
            # claim (another launch may hold the new one). The lock counts only on the file the path names now.
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        else:
            raise OSError(f"could not lock {path}: removed and made again under every try")
        self._lock_fd = fd
        self._write(self.me)

    def _claim_object(self, before: Claimant | None) -> None:
        if before is not None and gone(before, self._clock(), self.me.host) is None:
            raise refusal(self.run_dir, before)
        self._write(self.me)
        after = self._read()
        if after is not None and after.launch_id != self.me.launch_id:  # another launch wrote after this one
            raise refusal(self.run_dir, after)
        self._refresher = threading.Thread(target=self._refresh, name="raytf-claim", daemon=True)
        self._refresher.start()

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH_S):
            try:
                now = self._read()
                if now is not None and now.launch_id != self.me.launch_id:
                    log.error("run %s: another launch has claimed its run directory (%s): two launches write it "
                              "now; stop one of them", self.run_dir.run_name, now.describe())
                    return
                self._write(Claimant(**{**asdict(self.me), "refreshed_at": self._clock()}))
            except OSError as e:  # (storage out for a while: the next refresh tries again; STALE_S is 6 of them)
                log.debug("claim refresh: %s", e)

    def release(self) -> None:
        """The run's end: the claim goes (its file removed; the lock dropped)."""
        self._stop.set()
        if self._refresher is not None:
            self._refresher.join(timeout=5)
        try:
            if (holder := self._read()) is not None and holder.launch_id == self.me.launch_id:
                self.run_dir.remove(CLAIM_FILE)
        except OSError as e:
            log.debug("claim release: %s", e)
        if self._lock_fd is not None:
            try:  # (removed while held, then unlocked: a launch that locked it meanwhile sees it gone, and retries)
                os.unlink(self.run_dir.path(LOCK_FILE))
            except OSError:
                pass
            os.close(self._lock_fd)
            self._lock_fd = None


# The status `raytf runs` shows for a run whose result.json says running but whose launch is gone (its driver was
# killed, or its machine lost): it will never say otherwise by itself, and a relaunch resumes it.
LOST = "lost"


def launch_alive(run_dir: RunDir, clock: Callable[[], float] = time.time) -> bool:
    """Whether a launch holds `run_dir` now: its lock held (a filesystem), its claim fresh (an object store)."""
    if run_dir.local:
        import fcntl

        try:
            fd = os.open(run_dir.path(LOCK_FILE), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # (shared: taken and dropped, never in a launch's way
        except OSError:                                       # for longer than this call)
            return True
        finally:
            os.close(fd)
        return False
    claim = Claim(run_dir, clock)
    holder = claim._read()
    return holder is not None and gone(holder, clock(), claim.me.host) is None
