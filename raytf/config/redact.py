"""What looks secret in a configuration, and the views of it that may be written, logged or sent: secret-looking
names (environment variables, train.params keys, command-line flags), URL userinfo and query strings. Pure: no
I/O (raytf issue 19)."""

from __future__ import annotations

import copy
import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from typing import Any

from raytf.config.schema import Config

SECRET = "***"

# Parts of a name that say it holds a secret wherever they appear (API_KEY, apiKey, HF_TOKEN, DB_PASSWORD, ...).
_SECRET_PART = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|CONNECTION_?STRING|CONN_?STR|"
                          r"COOKIE|SIGNATURE", re.IGNORECASE)
# Words that do only as a whole word of the name: GITHUB_PAT (not PYTHONPATH), SENTRY_DSN, DB_PASS, X-Amz-Sig.
_SECRET_WORDS = frozenset({"PAT", "DSN", "PASS", "PW", "PWD", "AUTH", "AUTHORIZATION", "SIG", "SAS"})
# A database's address holds user:password@ as a rule: DATABASE_URL, DB_URI, REPLICA_DATABASE_URL.
_DATABASE_URL = re.compile(r"(DATABASE|(^|[_.-])DB)[_.-]?UR[LI]$", re.IGNORECASE)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})  # the shell's working directories


def secret_name(name: str) -> bool:
    """Whether a name (an environment variable, a mapping key, a flag without its dashes, a URL query parameter)
    says its value is a secret: KEY, SECRET, TOKEN, PASSWORD, CREDENTIAL, CONNECTION_STRING anywhere in it; PAT,
    DSN, PASS, PW, PWD, AUTH, SIG, SAS as a word of it; DATABASE_URL and the like."""
    name = str(name)
    if name.upper() in _NOT_SECRET:
        return False
    if _SECRET_PART.search(name) or _DATABASE_URL.search(name):
        return True
    return any(w.upper() in _SECRET_WORDS for w in _WORD.findall(name))


_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*://"
# scheme://user:password@host: greedy to the authority's last '@' (a password with a raw '@' in it); or a raw '/'
# in the password (`s3://KEY:abc/def@bucket`), told from a port (`host:8080/x@v1`, a git ref) by its first letter.
_USERINFO = re.compile(rf"({_SCHEME})(?:[^\s/?#]*@|[^\s/?#:@]*:(?![0-9]*(?:[/?#\s]|$))[^\s?#@]*@)")
_QUERY = re.compile(rf"({_SCHEME}[^\s?#]*)\?[^\s#]*")
_PARAM = re.compile(r"([?&;])([^=&;#\s]+)=([^&;#\s]*)")


def redact_text(text: str) -> str:
    """A string with every URL's userinfo and query string masked: `https://user:tok@host/x?sig=1#f` ->
    `https://***@host/x?***#f` (a pip or working_dir URL with a token, a signed URL, a DSN)."""
    text = _USERINFO.sub(rf"\g<1>{SECRET}@", text)
    return _QUERY.sub(rf"\g<1>?{SECRET}", text)


def without_userinfo(uri: str) -> str:
    """A URI as it may be shown and recorded: `s3://user:pw@bucket/x` -> `s3://bucket/x`."""
    return _USERINFO.sub(r"\g<1>", uri)


def redact_storage_path(path: str) -> str:
    """storage.path as it may be shown: userinfo masked (a run refuses it anyway) and the values of secret-named
    query parameters; the other parameters (endpoint_override, scheme, region) are settings and stay."""
    path = _USERINFO.sub(rf"\g<1>{SECRET}@", path)
    base, sep, query = path.partition("?")
    if not sep:
        return path
    return base + _PARAM.sub(lambda m: f"{m[1]}{m[2]}={SECRET}" if secret_name(m[2]) else m[0], sep + query)


def _secret_params(text: str) -> list[str]:
    """The secret-named query parameters of the URLs in `text` (names only)."""
    out = []
    for m in _QUERY.finditer(text):
        query = m[0][len(m[1]):]
        out += [p[2] for p in _PARAM.finditer(query) if secret_name(p[2])]
    return out


def has_secret_url(text: str) -> bool:
    """A URL with userinfo (`postgres://u:pw@h/db`) or a secret-named query parameter (`?sig=`, `?token=`)."""
    return bool(_USERINFO.search(text) or _secret_params(text))


def storage_path_problem(path: str) -> str | None:
    """Why storage.path must not be used as it is, without its value (it holds a secret): credentials in the URI
    (`s3://KEY:SECRET@bucket/x`, `hdfs://user@host/x`, any scheme), or secret-named query parameters
    (`?secret_key=...`). None when it is fine. Pure."""
    scheme, sep, rest = path.partition("://")
    if not sep:
        return None
    if _USERINFO.match(path):
        return (f"storage.path contains credentials (user:password@... in the {scheme}:// URI; its value is not "
                "shown). Fix: remove them from the URI and give each node its own: storage.credentials_file (an "
                "AWS-style file at the same path on every node) for s3://, or the nodes' environment and credential "
                "files")
    names = _secret_params(f"{scheme}://{rest}")
    if names:
        return (f"storage.path's query holds credentials ({', '.join(f'{n}=...' for n in names)}; values not "
                "shown). Fix: remove them from the URI and give each node its own: storage.credentials_file for "
                "s3://, or the nodes' environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
    return None


_FLAG = re.compile(r"^(--?[A-Za-z0-9][\w.-]*)(=.*)?$", re.DOTALL)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][\w.-]*)=(.*)$", re.DOTALL)  # key=value (Hydra-style overrides)


def redact_args(args: Sequence[Any]) -> list[str]:
    """train.args as they may be written or logged: the value of a flag whose name looks secret masked
    (`--api-key X`, `--api_key=X`, `--hf-token X`, `api_key=X`), and URLs' userinfo and query strings. The task
    itself gets the real args."""
    out: list[str] = []
    pending = False  # the previous item was a secret flag without `=value`: this one is its value
    for item in map(str, args):
        if pending:
            pending = False
            if not re.match(r"^--[A-Za-z]", item):  # (a long flag next: the secret flag had no value)
                out.append(SECRET)
                continue
        flag = _FLAG.match(item)
        if flag and secret_name(flag[1].lstrip("-")):
            if flag[2] is None:
                pending = True
                out.append(item)
            else:
                out.append(f"{flag[1]}={SECRET}")
            continue
        assignment = _ASSIGNMENT.match(item)
        if assignment and secret_name(assignment[1].rsplit(".", 1)[-1]):
            out.append(f"{assignment[1]}={SECRET}")
            continue
        out.append(redact_text(item))
    return out


def secret_runtime_env(runtime_env: Mapping[str, Any]) -> list[str]:
    """What in ray.runtime_env looks secret, by name only: `env_vars.NAME` for a secret-looking name or a value
    holding a URL with credentials, and any other entry holding such a URL (`pip[0]`, `working_dir`). Ray shows
    runtime_env to every client of the cluster (its state API) and writes it to its logs. Pure."""
    out: list[str] = []

    def visit(value: Any, where: str) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                visit(v, f"{where}.{k}" if where else str(k))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                visit(v, f"{where}[{i}]")
        elif isinstance(value, str) and has_secret_url(value):
            out.append(where)

    env = runtime_env.get("env_vars") if isinstance(runtime_env, Mapping) else None
    for name, value in (env.items() if isinstance(env, Mapping) else ()):
        if secret_name(name) or has_secret_url(str(value)):
            out.append(f"env_vars.{name}")
    for key, value in (runtime_env.items() if isinstance(runtime_env, Mapping) else ()):
        if key != "env_vars":
            visit(value, str(key))
    return out


def _mask_strings(value: Any) -> Any:
    if isinstance(value, str):
        return SECRET
    if isinstance(value, dict):
        return {k: _mask_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_strings(v) for v in value]
    return value  # numbers and booleans are settings (key_dim: 64), not secrets


def _redact_free(value: Any) -> Any:
    """A free-form value (train.params, ray.runtime_env, sweep.space): strings under a secret-looking key
    masked, URLs' userinfo and query strings elsewhere."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: _mask_strings(v) if secret_name(str(k)) else _redact_free(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_free(v) for v in value]
    return value


def _redact_section(section: Any) -> None:
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            _redact_section(value)
        elif isinstance(value, (str, dict, list)) and not isinstance(value, enum.Enum):
            setattr(section, f.name, _redact_free(value))


def redacted(cfg: Config) -> Config:
    """A copy safe to write or log (config.yaml, result.json): storage keys masked; storage.path's secret query
    values; runtime_env variables whose names look secret (whatever their value); train.args' secret flag values;
    strings under secret-looking keys of train.params and runtime_env; and every URL's userinfo and query string
    anywhere else."""
    out = copy.deepcopy(cfg)
    path, args = out.storage.path, list(out.train.args)
    _redact_section(out)
    st = out.storage
    st.path = redact_storage_path(path)
    st.access_key = None if st.access_key is None else SECRET
    st.secret_key = None if st.secret_key is None else SECRET
    out.train.args = redact_args(args)
    env = out.ray.runtime_env.get("env_vars") if isinstance(out.ray.runtime_env, dict) else None
    if isinstance(env, dict):
        for k in env:
            if secret_name(k):
                env[k] = SECRET
    return out


def task_view(cfg: Config) -> Config:
    """The config as it is sent to the tasks (pickled into every actor call): without storage keys (a run
    refuses them anyway), without the `ray` section (its runtime_env, its address), which the tasks never
    read: Ray itself set up their processes, and without `tracking` (the driver logs to MLflow, not the tasks)."""
    out = copy.copy(cfg)
    out.ray = type(cfg.ray)()
    out.tracking = type(cfg.tracking)()  # the driver's alone (a database URI may hold its password)
    out.storage = dataclasses.replace(cfg.storage, access_key=None, secret_key=None)
    return out
