"""The embedded Ray starts with token auth (RAY_AUTH_MODE=token before ray.init), a user's own mode stands and is
warned of, and joining a cluster without token auth is warned of. Ray itself is not started: ray.init is
replaced by a recorder."""

import logging

import pytest

from raytf.config import load_config

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
def connect():
    # Imported here: collection must load no Ray (tests/core/conftest.py checks the pure tier).
    from raytf._driver import connect

    return connect


@pytest.fixture
def recorded_init(monkeypatch, connect):
    import ray

    monkeypatch.setattr(connect, "_reload_ray_config", lambda: None)
    # A copy of the environment: what ensure_ray sets stays in this test.
    monkeypatch.setattr(connect.os, "environ", dict(connect.os.environ))
    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append((kw.get("address"), connect.os.environ.get(
        connect.AUTH_MODE_ENV))))
    connect.os.environ.pop("RAY_ADDRESS", None)
    return seen


def test_embedded_ray_is_started_with_token_auth(connect, recorded_init, monkeypatch, caplog):
    connect.os.environ.pop(connect.AUTH_MODE_ENV, None)
    assert connect.ensure_ray(load_config("conf/local.yaml")) is True
    assert recorded_init == [("local", "token")]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_users_auth_mode_stands_and_is_warned_of(connect, recorded_init, monkeypatch, caplog):
    connect.os.environ[connect.AUTH_MODE_ENV] = "disabled"
    connect.ensure_ray(load_config("conf/local.yaml"))
    assert recorded_init == [("local", "disabled")]
    assert [r.getMessage() for r in caplog.records if "accepts work from anyone" in r.getMessage()]


def test_joining_a_cluster_without_token_auth_is_warned_of(connect, recorded_init, monkeypatch, caplog):
    monkeypatch.setattr(connect, "check_reachable", lambda address: None)
    monkeypatch.setattr(connect, "not_ray", lambda address: None)
    monkeypatch.setattr(connect, "token_auth", lambda: False)
    connect.ensure_ray(load_config("conf/local.yaml", ["ray.address=198.18.0.1:6379"]))
    lines = [r.getMessage() for r in caplog.records if "does not use token auth" in r.getMessage()]
    assert len(lines) == 1 and "198.18.0.1:6379" in lines[0]
    caplog.clear()
    monkeypatch.setattr(connect, "token_auth", lambda: True)
    connect.ensure_ray(load_config("conf/local.yaml", ["ray.address=198.18.0.1:6379"]))
    assert not [r for r in caplog.records if "token auth" in r.getMessage()]


def test_joining_a_cluster_ships_the_launch_directory_once(connect, monkeypatch, tmp_path, caplog):
    """The CLI and raytf.fit join a cluster with the launch directory as the job's working_dir (raytf issue 32), not
    under `ray job submit --working-dir` (the job has one), not with ray.ship_code=off, not on an embedded Ray."""
    import ray

    from raytf._driver import usercode

    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append(kw.get("runtime_env")))
    monkeypatch.setattr(connect, "check_reachable", lambda address: None)
    monkeypatch.setattr(connect, "not_ray", lambda address: None)
    monkeypatch.setattr(connect, "token_auth", lambda: True)
    monkeypatch.setattr(connect, "_reload_ray_config", lambda: None)
    monkeypatch.setattr(connect.os, "environ", {"RAY_AUTH_MODE": "token"})
    monkeypatch.chdir(tmp_path)
    (tmp_path / "usertrain.py").write_text("def train(ctx):\n    pass\n")
    cluster = ["ray.address=198.18.0.2:6379", "train.entrypoint=usertrain:train"]
    with caplog.at_level(logging.INFO, logger="raytf"):
        connect.ensure_ray(load_config(None, cluster))
    assert seen == [{"working_dir": str(tmp_path), "excludes": [".git", ".venv", "venv", "__pycache__", "/runs/"]}]
    assert [r for r in caplog.records if r.getMessage().startswith(f"shipping {tmp_path} to every task")]
    connect.ensure_ray(load_config(None, [*cluster, "ray.ship_code=off"]))
    connect.ensure_ray(load_config(None, ["train.entrypoint=usertrain:train"]))  # embedded
    connect.os.environ[usercode.JOB_CONFIG_ENV] = '{"runtime_env": {"working_dir": "gcs://_ray_pkg_1.zip"}}'
    connect.ensure_ray(load_config(None, cluster))
    assert seen[1:] == [None, None, None]


def test_a_launch_directory_over_rays_limit_is_one_line(connect, monkeypatch, tmp_path):
    """Ray refuses a package over its upload limit (a RuntimeEnvSetupError out of ray.init, after it started its
    processes): one line naming the directory and what to do, and nothing of Ray left running."""
    import ray
    from ray.exceptions import RuntimeEnvSetupError

    from raytf.errors import ConfigError

    def refuse(**kw):
        raise RuntimeEnvSetupError("Failed to set up runtime environment.\nFailed to upload working_dir "
                                   f"{kw['runtime_env']['working_dir']} to the Ray cluster: Package size (612.40MiB) "
                                   "exceeds the maximum size of 512.00MiB. To exclude large files, ...")

    shutdowns = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(1))
    monkeypatch.setattr(connect, "check_reachable", lambda address: None)
    monkeypatch.setattr(connect, "not_ray", lambda address: None)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "usertrain.py").write_text("def train(ctx):\n    pass\n")
    with pytest.raises(ConfigError) as info:
        connect.ensure_ray(load_config(None, ["ray.address=198.18.0.2:6379", "train.entrypoint=usertrain:train"]))
    assert str(info.value).startswith(f"ray.ship_code: the launch directory {tmp_path} packs to 612.40MiB, over Ray's "
                                      "limit of 512.00MiB")
    assert "\n" not in str(info.value) and shutdowns == [1]


def test_an_address_that_answers_but_is_not_rays_is_said_in_seconds(connect, ray_local, monkeypatch):
    """A port that accepts connections but is not Ray's GCS (an HTTP server, Ray's dashboard port; a server that
    says nothing): one line, in seconds (raytf issue 71: ray.init retried it for 4-9 minutes with no line). Ray's
    own GCS (the session's) speaks gRPC: nothing said."""
    import http.server
    import socket
    import threading
    import time

    from tests.conftest import state_address

    assert connect.not_ray(state_address()) is None
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    mute = socket.create_server(("127.0.0.1", 0))
    try:
        assert "an HTTP server answers there" in connect.not_ray(f"127.0.0.1:{web.server_address[1]}")
        t = time.monotonic()
        said = connect.not_ray(f"127.0.0.1:{mute.getsockname()[1]}", timeout_s=1.0)
        assert said == "it did not answer a gRPC client's greeting within 1s" and time.monotonic() - t < 5
        monkeypatch.setattr(connect.ray, "is_initialized", lambda: False)  # (as a new driver: refused before init)
        with pytest.raises(connect.RaytfError, match=r"not a Ray cluster's address: an HTTP server answers there"):
            connect.ensure_ray(load_config("conf/local.yaml", [f"ray.address=127.0.0.1:{web.server_address[1]}"]))
    finally:
        web.shutdown()
        mute.close()


def test_a_refused_token_is_told_apart_from_a_cluster_that_is_not_there(connect):
    """ray.init's refusal of this driver's token (none: AuthenticationError; another cluster's: InvalidAuthToken) is
    one line naming the token's places (ensure_ray), not `ray start --head`, the fix for no cluster at all."""
    from ray.exceptions import AuthenticationError

    assert connect._refused_token(AuthenticationError("no token"))
    assert connect._refused_token(ConnectionError("GCS: InvalidAuthToken: the token does not match"))
    assert not connect._refused_token(ConnectionError("could not reach the GCS at 127.0.0.1:6379"))
