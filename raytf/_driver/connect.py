"""Which Ray to use and how the tasks find the user's code. Imports Ray, never TensorFlow."""

from __future__ import annotations

import logging
import os

import ray
from ray.exceptions import RuntimeEnvSetupError

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
        with usercode.quiet_default_excludes():
            ray.init(address=address, log_to_driver=r.log_to_driver, configure_logging=False, runtime_env=runtime_env)
    except (ConnectionError, RuntimeError, ValueError, RuntimeEnvSetupError) as e:
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
