"""Watch the Ray head from the driver: without its GCS a Ray cluster is gone (Ray without GCS fault tolerance
does not outlive its head: the other nodes' raylets exit, and so, after
`gcs_rpc_server_reconnect_timeout_s`, does this process). The driver's own calls may block on it meanwhile, so
the watch runs in a thread of its own and hands the verdict to a callback."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

from raytf._core.failure import Contact, HeadContact

log = logging.getLogger(__name__)


def unreachable(address: str, timeout_s: float) -> OSError | None:
    """Why nothing accepts a TCP connection at a host:port (or ray://host:port) address, or None when something
    does (or the address has no port to try). A killed host refuses at once; one cut off lets it time out."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        return None
    except OSError as e:
        return e


def answers(address: str, timeout_s: float = 2.0) -> bool:
    return unreachable(address, timeout_s) is None


class HeadWatch:
    """Probes `address` every `probe_s`; calls `on_lost(why)` once, from its thread, when the head has not
    answered for `lost_after_s` (failure.HeadContact)."""

    def __init__(self, address: str, on_lost: Callable[[str], None], *, lost_after_s: float, probe_s: float = 2.0,
                 probe: Callable[[str], bool] = answers) -> None:
        self.address = address
        self.on_lost = on_lost
        self.probe_s = probe_s
        self.probe = probe
        self.contact = HeadContact(lost_after_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="raytf-head-watch", daemon=True)

    def start(self) -> HeadWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.probe_s):
            before = self.contact.state
            state = self.contact.observe(self.probe(self.address), time.monotonic())
            if state is Contact.SILENT and before is Contact.UP:
                log.warning("the Ray head at %s does not answer; the run is given up if it stays silent for %gs",
                            self.address, self.contact.lost_after_s)
            elif state is Contact.UP and before is Contact.SILENT:
                log.warning("the Ray head at %s answers again", self.address)
            elif state is Contact.LOST:
                if not self._stop.is_set():
                    self.on_lost(f"it has not answered for {self.contact.lost_after_s:g}s")
                return
