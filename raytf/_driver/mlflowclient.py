"""MLflow's client as raytf uses it (tracking.mlflow): whether MLflow is installed with what a URI needs, a client
with short HTTP requests, the experiment and a run found by tag. MLflow is imported only when a client is made."""

from __future__ import annotations

import importlib.util
import os

from raytf._core import tracking as tr
from raytf.config.redact import redact_text, without_userinfo
from raytf.errors import ConfigError


class Disabled(Exception):
    """Tracking cannot go on for this run (said once; training goes on)."""


# MLflow's HTTP client waits 120 s a request and retries 7 times with back-off (~4 minutes) by default
# (mlflow/environment_variables.py: MLFLOW_HTTP_REQUEST_TIMEOUT, MLFLOW_HTTP_REQUEST_MAX_RETRIES, read at each
# request). The sender retries on its own schedule (`tr.Backoff`), so each request is short and tried once. Set in
# the driver's process only where the user has not set them.
HTTP_ENV = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
# MLflow's URIs whose store is a database in this process (SQLAlchemy): the full `mlflow` package, not mlflow-skinny.
_DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


def shown(uri: str) -> str:
    """The tracking URI as it may be logged: no password (`postgresql://user:pw@host/db`), no query."""
    return redact_text(without_userinfo(uri))


def check_installed(uri: str) -> None:
    """MLflow is importable in this process, with what `uri` needs; else a one-line ConfigError (the CLI's exit 2).
    Looks, does not import (MLflow takes seconds to import)."""
    spec = importlib.util.find_spec("mlflow")
    if spec is None or not spec.origin:
        raise ConfigError(f"tracking.mlflow.uri is set ({shown(uri)}) but MLflow is not installed here. Fix: pip "
                          "install 'raytf[mlflow]' (or mlflow), or unset tracking.mlflow.uri")
    scheme = uri.partition(":")[0].partition("+")[0]
    # (A file of the package, not find_spec of the submodule: that would import mlflow itself.)
    sql_store = os.path.join(os.path.dirname(spec.origin), "store", "tracking", "sqlalchemy_store.py")
    if scheme in _DATABASE_SCHEMES and (importlib.util.find_spec("sqlalchemy") is None
                                        or not os.path.exists(sql_store)):
        raise ConfigError(f"tracking.mlflow.uri ({shown(uri)}) is a database, which needs the full MLflow package "
                          "(mlflow-skinny only talks to a tracking server). Fix: pip install mlflow, or use a "
                          "tracking server's http(s):// URI")


def version() -> str:
    try:
        from importlib.metadata import version

        return version("raytf")
    except Exception:  # (a checkout run without being installed)
        return "unknown"


def error_code(e: BaseException) -> str | None:
    return getattr(e, "error_code", None)


def _set_http_env() -> None:
    for key, value in HTTP_ENV.items():
        os.environ.setdefault(key, value)


def make_client(uri: str):
    _set_http_env()
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def experiment_for(client, uri: str, name: str) -> str:
    """The experiment's id, made when missing (beside a local SQLite database: `tr.local_artifact_root`)."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(name, artifact_location=tr.local_artifact_root(uri))
        except Exception as e:
            if error_code(e) != "RESOURCE_ALREADY_EXISTS":  # (a sweep's trials making it at once)
                raise
            exp = client.get_experiment_by_name(name)
    if exp.lifecycle_stage == "deleted":
        raise Disabled(f"MLflow experiment {name!r} is deleted: restore it (mlflow experiments restore) or set "
                        "tracking.mlflow.experiment to another")
    return exp.experiment_id


def find_run(client, experiment_id: str, tag: str, value: str):
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{tag}` = '{value}'", max_results=1,
                              order_by=["attributes.start_time DESC"])
    return runs[0] if runs else None


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."
