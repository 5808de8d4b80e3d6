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
        elif isinstance(source, Config):
            layers.append(OmegaConf.structured(source))
        elif isinstance(source, Mapping):
            layers.append(OmegaConf.create(dict(source)))
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
        return layer
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value: write e.g. train.epochs=3")
    return OmegaConf.from_dotlist(list(overrides))


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
