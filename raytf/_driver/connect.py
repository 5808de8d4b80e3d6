"""Which Ray to use and how the tasks find the user's code. Imports Ray, never TensorFlow."""

from __future__ import annotations

import logging
import os

import ray
from ray.exceptions import AuthenticationError, RuntimeEnvSetupError

from raytf._core import private_apis as apis
from raytf._core import shipping
from raytf._driver import usercode
from raytf._driver.headwatch import unreachable
from raytf._driver.preflight import resolve_address
from raytf.config import Config
from raytf.errors import RaytfError

log = logging.getLogger("raytf")


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds, not minutes, when a host:port address has nothing listening."""
    e = unreachable(address, timeout_s)
    if e is not None:
        raise RaytfError(f"ray.address ({address!r}): nothing reachable there ({e}). Fix: start the cluster "
                         "with `ray start --head` and pass its address, or ray.address=null for an embedded "
                         "local Ray") from None


# An HTTP/2 client's first bytes (RFC 9113 3.4: the preface, then an empty SETTINGS frame). Ray's GCS is a gRPC
# server: it answers with a SETTINGS frame of its own (frame type 4) before any call or token is looked at.
_H2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS = 4


def not_ray(address: str, timeout_s: float = 5.0) -> str | None:
    """Why what listens at a host:port address is not Ray's GCS (it answers HTTP/1, as Ray's dashboard port or a
    web server does; it does not answer an HTTP/2 greeting), or None when it speaks HTTP/2 (or the address has no
    port to try, or Ray's gRPC uses TLS: RAY_USE_TLS). ray.init would retry such a port for minutes with no line
    (raytf issue 71: 4-9 minutes)."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit() or os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            sock.sendall(_H2_GREETING)
            head = sock.recv(9)
    except TimeoutError:
        return f"it did not answer a gRPC client's greeting within {timeout_s:g}s"
    except OSError as e:
        return f"it closed the connection ({e})"
    if head and all(32 <= b < 127 or b in b"\t\r\n" for b in head):  # (text: HTTP/1's answer, even HTTP/0.9's)
        return "an HTTP server answers there (Ray's dashboard port, or a web server), not Ray's GCS"
    if len(head) < 4 or head[3] != _SETTINGS:
        return "what answers there does not speak gRPC"
    return None


AUTH_MODE_ENV = "RAY_AUTH_MODE"


def ensure_ray(cfg: Config) -> bool:
    """Connect to (or start) Ray as configured; True when this call started an embedded Ray. Joining a cluster, the
    launch directory goes with the connection as the job's working_dir (ray.ship_code; usercode.init_env)."""
    if ray.is_initialized():
        return False
    r = cfg.ray
    address = resolve_address(cfg)
    job = usercode.init_env(cfg, embedded=address is None)  # (a ConfigError here: nothing started yet)
    runtime_env = job.runtime_env or None
    if job.shipped:
        log.info("shipping %s to every task as the Ray job's working_dir (.gitignore and .rayignore honoured; left "
                 "out: %s); ray.ship_code=off if the nodes have the code", job.shipped,
                 ", ".join(job.runtime_env.get(shipping.EXCLUDES, [])))
    try:
        if address is None:
            # Token auth for the embedded Ray, explicitly: Ray turns it on by default for a new local cluster
            # only from 2.59, and says so in a warning on every start; a Ray without it runs any code sent to
            # its ports by anyone who can reach this machine. A user's RAY_AUTH_MODE stands (and is warned of).
            if AUTH_MODE_ENV not in os.environ and apis.available(apis.EMBEDDED_AUTH, log.warning):
                os.environ[AUTH_MODE_ENV] = "token"
                _reload_ray_config()
            if os.environ.get(AUTH_MODE_ENV, "token").lower() != "token":
                log.warning("%s=%s: the embedded Ray accepts work from anyone who can reach this machine's Ray "
                            "ports. Fix: unset it (raytf then starts Ray with token auth)", AUTH_MODE_ENV,
                            os.environ[AUTH_MODE_ENV])
            with usercode.quiet_default_excludes():
                ray.init(address="local", num_cpus=r.num_cpus, include_dashboard=r.include_dashboard,
                         log_to_driver=r.log_to_driver, configure_logging=False, runtime_env=runtime_env)
            return True
        check_reachable(address)
        if (why := not_ray(address)) is not None:
            raise RaytfError(f"ray.address ({address!r}): not a Ray cluster's address: {why}. Fix: the head's GCS "
                             "address, host:6379 by default (what `ray start --head` prints, or `ray status` on the "
                             "head shows), or ray.address=null for an embedded local Ray")
        with usercode.quiet_default_excludes():
            ray.init(address=address, log_to_driver=r.log_to_driver, configure_logging=False, runtime_env=runtime_env)
    except (AuthenticationError, ConnectionError, RuntimeError, ValueError, RuntimeEnvSetupError) as e:
        if address is not None and _refused_token(e):  # (no token, or another cluster's: never `ray start`)
            ray.shutdown()
            raise RaytfError(f"ray.address ({address!r}): the cluster refused this driver's Ray token. Fix: the "
                             "cluster's token in RAY_AUTH_TOKEN (or ~/.ray/auth_token, or a file named by "
                             "RAY_AUTH_TOKEN_PATH), with RAY_AUTH_MODE=token, as on its nodes (docs/security.md)"
                             ) from None
        refused = usercode.init_error(e, job)
        # Ray refuses the job's runtime_env after starting an embedded Ray's processes (or connecting): none is left.
        ray.shutdown()
        if refused is not None:
            raise refused from None
        raise RaytfError(f"ray.address ({address!r}): cannot connect to Ray: {e}. Fix: start it with "
                         "`ray start --head`, or set ray.address=null for an embedded local Ray") from None
    if not address.startswith("ray://") and token_auth() is False:
        log.warning("the Ray cluster at %s does not use token auth: anyone who can reach its ports can run code "
                    "on every node. Fix: start every node (and this driver) with RAY_AUTH_MODE=token and the "
                    "cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN (docs/security.md)", address)
    return False


def _refused_token(e: BaseException) -> bool:
    """Whether ray.init's `e` is Ray's refusal of this process's token (a missing one: AuthenticationError; another
    cluster's: its GCS's UNAUTHENTICATED status, InvalidAuthToken, in the message)."""
    return isinstance(e, AuthenticationError) or any(
        word in str(e) for word in ("InvalidAuthToken", "UNAUTHENTICATED", "Unauthenticated"))


def _reload_ray_config() -> None:
    """This process's Ray reads RAY_AUTH_MODE once, when it loads: re-read it, as Ray's own
    `authentication_token_setup._enable_token_auth` does (Ray 2.60), or this driver would talk to its own
    token-auth GCS without a token (InvalidAuthToken). A private API (raytf/_core/private_apis.py, EMBEDDED_AUTH):
    without it raytf leaves the mode to Ray."""
    apis.lookup(apis.RAYLET_CONFIG)("")


def token_auth() -> bool | None:
    """Whether this process talks to Ray with token auth (the mode is process-wide: RAY_AUTH_MODE); None when this
    Ray cannot say (its private accessor moved: one warning, AUTH_CHECK)."""
    if not apis.available(apis.AUTH_CHECK, log.warning):
        return None
    return apis.lookup(apis.AUTH_MODE)() == apis.lookup(apis.AUTH_TOKEN)


def started_here() -> bool:
    """Whether the Ray this process is connected to was started by this process (`ray.init()` without an
    address, here or in the user's notebook: one machine, no autoscaler), not a cluster it joined
    (`ray.init(address=...)`, Ray Client). Ray keeps that only on its private node object: a head node
    started in-process, not a connection to a running one (raytf/_core/private_apis.py, EMBEDDED: without it, a
    cluster is assumed: an impossible placement is waited for, not refused at once)."""
    if not apis.available(apis.EMBEDDED, log.warning):
        return False
    node = apis.owner(apis.GLOBAL_NODE)[0]._global_node  # (read now: None until Ray is up)
    return bool(node is not None and getattr(node, "head", False))
