"""Loading a configuration: the schema, a YAML file or a dict, and `key=value` overrides merged by OmegaConf,
then the cross-field rules; plus the plain and redacted views written to the run directory."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from raytf.config.rules import validate
from raytf.config.schema import Config
from raytf.errors import ConfigError


def load_config(
    source: str | Path | Mapping[str, Any] | Config | None = None,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
) -> Config:
    """Build a validated Config from a YAML path, a dict or a Config, plus overrides.

    Args:
        source: a YAML file path, a (nested) dict, an existing Config, or None for defaults.
        overrides: `["key=value", ...]` (OmegaConf dotlist) or a `{"dotted.key": value}` mapping.

    Returns:
        A Config of plain dataclasses.

    Raises:
        ConfigError: one line naming the key, the bad value and how to fix it.
    """
    try:
        layers = [OmegaConf.structured(Config)]
        if isinstance(source, (str, Path)):
            path = Path(source)
            if not path.is_file():
                raise ConfigError(f"config file {str(source)!r} not found: pass the path of a YAML file")
            layers.append(OmegaConf.load(path))
            _check_lists(layers[-1])
        elif isinstance(source, Config):
            layers.append(OmegaConf.structured(source))
        elif isinstance(source, Mapping):
            layers.append(OmegaConf.create(dict(source)))
            _check_lists(layers[-1])
        elif source is not None:
            raise ConfigError(f"config source {source!r} is not a path, dict or Config")
        if overrides:
            layers.append(_overrides_layer(overrides))
        cfg = OmegaConf.to_object(OmegaConf.merge(*layers))
    except OmegaConfBaseException as e:
        raise ConfigError(_one_line(e)) from None
    assert isinstance(cfg, Config)
    validate(cfg)
    return cfg


def _overrides_layer(overrides: Sequence[str] | Mapping[str, Any]):
    if isinstance(overrides, Mapping):
        layer = OmegaConf.create()
        for key, value in overrides.items():
            OmegaConf.update(layer, key, value, force_add=True)
        _check_lists(layer)
        return layer
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value: write e.g. train.epochs=3")
    layer = OmegaConf.from_dotlist(list(overrides))
    _check_lists(layer, {k.strip(): v for k, _, v in (item.partition("=") for item in overrides)})
    return layer


def _check_lists(layer, texts: Mapping[str, str] | None = None) -> None:
    """A list-valued key (train.args, train.python_path) given a scalar or a mapping: OmegaConf would say only
    "AnyNode is not a ListConfig" (or raise a TypeError for a mapping). `texts`: the overrides as typed."""
    raw = OmegaConf.to_container(layer, resolve=False)
    for key in _list_keys():
        value: Any = raw
        for part in key.split("."):
            value = value.get(part, _ABSENT) if isinstance(value, dict) else _ABSENT
        if value is _ABSENT or isinstance(value, list) or (isinstance(value, str) and "${" in value):
            continue  # not given here, a list, or an interpolation (OmegaConf checks what it resolves to)
        if texts is not None and key in texts:
            text = texts[key]
            items = "" if value is None else f'"{text}"' if isinstance(value, dict) else text
            raise ConfigError(f"{key}: {text!r} is not a list: write a list: {key}=[{items}]")
        raise ConfigError(f"{key}: {value!r} is not a list: write a list, e.g. {key.rpartition('.')[2]}: "
                          "[a, b] in YAML ([] for none), or [a,b] as a key=value override")


_ABSENT = object()
_LIST_KEYS: frozenset[str] | None = None


def _list_keys() -> frozenset[str]:
    """The schema's list-valued keys (train.args, train.python_path)."""
    global _LIST_KEYS
    if _LIST_KEYS is None:
        _LIST_KEYS = frozenset(_lists(OmegaConf.structured(Config), ""))
    return _LIST_KEYS


def _lists(node, prefix: str) -> list[str]:
    out = []
    for name in node:
        child = node[name]
        if OmegaConf.is_list(child):
            out.append(f"{prefix}{name}")
        elif OmegaConf.is_dict(child) and OmegaConf.get_type(child) is not dict:  # a section of the schema
            out += _lists(child, f"{prefix}{name}.")
    return out


def _one_line(e: OmegaConfBaseException) -> str:
    # OmegaConf's first line already names the key and suggests spellings; its extra lines
    # (full_key, object_type) repeat it. Keep one line, with the full key made explicit.
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    full_key = getattr(e, "full_key", None)
    if full_key and full_key not in first:
        first = f"{full_key}: {first}"
    return re.sub(r"\s+", " ", first)


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain-python view of a Config (enums as their YAML spelling)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


SECRET = "***"
_SECRET_NAME = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL)", re.IGNORECASE)


def redacted(cfg: Config) -> Config:
    """A copy safe to write or log: storage credentials and secret-looking runtime_env variables masked."""
    out = copy.deepcopy(cfg)
    if out.storage.access_key is not None:
        out.storage.access_key = SECRET
    if out.storage.secret_key is not None:
        out.storage.secret_key = SECRET
    env = out.ray.runtime_env.get("env_vars") if isinstance(out.ray.runtime_env, dict) else None
    if isinstance(env, dict):
        for k in env:
            if _SECRET_NAME.search(str(k)):
                env[k] = SECRET
    return out
