"""Loading a configuration: the schema, a YAML file or a dict, and `key=value` overrides merged by OmegaConf,
then the cross-field rules; plus the plain views (the redacted one is `redact`'s)."""

from __future__ import annotations

import dataclasses
import functools
import io
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from raytf.config.rules import number_wanted, validate
from raytf.config.schema import Config
from raytf.errors import ConfigError


def load_config(
    source: str | Path | Mapping[str, Any] | Config | None = None,
    overrides: Sequence[str] | Mapping[str, Any] | None = None,
    *,
    program: Mapping[str, str] | None = None,
) -> Config:
    """Build a validated Config from a YAML path, a dict or a Config, plus overrides.

    Args:
        source: a YAML file path, a (nested) dict, an existing Config, or None for defaults.
        overrides: `["key=value", ...]` (OmegaConf dotlist) or a `{"dotted.key": value}` mapping.
        program: {dotted key: value} set last, before validation: what raytf.fit(train_fn=...) records of the
            function it was given (train.entrypoint, train.eval_entrypoint), so a source without one validates.

    Returns:
        A Config of plain dataclasses.

    Raises:
        ConfigError: one line naming the key, the bad value and how to fix it.
    """
    try:
        layers = [_schema()]
        if isinstance(source, (str, Path)):
            layers.append(_read_yaml(source))
            _check_shapes(layers[-1])
        elif isinstance(source, Config):
            layers.append(OmegaConf.structured(source))
        elif isinstance(source, Mapping):
            layers.append(OmegaConf.create(dict(source)))
            _check_shapes(layers[-1])
        elif source is not None:
            raise ConfigError(f"config source {source!r} is not a path, dict or Config")
        if overrides:
            layers.append(_overrides_layer(overrides))
        if program:
            layers.append(_overrides_layer(dict(program)))
        for layer in layers[1:]:
            _yaml_words(layer)
        cfg = OmegaConf.to_object(OmegaConf.merge(*layers))
    except OmegaConfBaseException as e:
        raise ConfigError(_one_line(e)) from None
    assert isinstance(cfg, Config)
    if isinstance(source, (str, Path)) and cfg.tracking.mlflow.uri and not cfg.tracking.mlflow.experiment:
        # The experiment a run is tracked in (tracking.mlflow): its config file's name, so the runs of one setup
        # gather in one MLflow experiment; a Config made in code has none and falls back to "raytf".
        cfg.tracking.mlflow.experiment = Path(source).stem
    validate(cfg)
    return cfg


@functools.cache
def _schema() -> DictConfig:
    """The schema as OmegaConf's structured config, made once per process (35 ms each time here, most of a
    load): OmegaConf.merge copies its first layer, so the one made here is never changed."""
    return OmegaConf.structured(Config)


# YAML 1.1 (PyYAML, OmegaConf) reads `off` and `on` as booleans: where "off" is one of a setting's words, a boolean
# is that word as the user typed it (`ray.ship_code: off`).
_WORDS = {"ray.ship_code": {False: "off", True: "auto"}}


def _yaml_words(layer) -> None:
    for key, words in _WORDS.items():
        value = OmegaConf.select(layer, key, default=None)
        if isinstance(value, bool):
            OmegaConf.update(layer, key, words[value])


def _read_yaml(source: str | Path) -> DictConfig:
    """A YAML file's mapping; anything else (no such file, a directory, not UTF-8, not YAML, a list or a single
    value at the top) is a ConfigError naming the file and what to do."""
    path, where = Path(source), f"config file {str(source)!r}"
    if path.is_dir():
        inside = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
        example = f", e.g. {inside[0]}" if inside else ""
        raise ConfigError(f"{where} is a directory: pass the path of a YAML file{example}")
    if not path.exists():
        raise ConfigError(f"{where} not found: pass the path of a YAML file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{where} cannot be read ({e.strerror or e}): pass a readable YAML file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{where} is not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}): pass a YAML "
                          "file, saved as UTF-8") from None
    try:
        # The top level's kind first: OmegaConf would read a lone word as a key, and fail on a number.
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        is_null = isinstance(root, yaml.ScalarNode) and root.tag == "tag:yaml.org,2002:null"
        if root is not None and not is_null and not isinstance(root, yaml.MappingNode):
            value = root.value if len(root.value) <= 40 else f"{root.value[:40]}..."
            got = "a list" if isinstance(root, yaml.SequenceNode) else f"a single value ({value!r})"
            raise ConfigError(f"{where} holds {got} at its top level, not a mapping: write sections of "
                              "`key: value` lines, e.g. `train:` and under it `  entrypoint: package.module:function`")
        layer = OmegaConf.load(io.StringIO(text))
    except yaml.YAMLError as e:
        raise ConfigError(f"{where} is not valid YAML: {_yaml_problem(e)}: fix the syntax there (quote a value "
                          "that holds ': ' or starts with '{', '[', '*', '&' or '!')") from None
    assert isinstance(layer, DictConfig)
    return layer


def _yaml_problem(e: yaml.YAMLError) -> str:
    """PyYAML's error on one line: the problem and where (1-based, as editors count), then its context."""
    if not isinstance(e, yaml.MarkedYAMLError):
        return re.sub(r"\s+", " ", str(e)).strip()
    out = e.problem or e.context or type(e).__name__
    if e.problem_mark is not None:
        out += f" at line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1}"
    if e.context and e.problem:
        out += f" ({e.context}"
        if e.context_mark is not None:
            out += f" from line {e.context_mark.line + 1}, column {e.context_mark.column + 1}"
        out += ")"
    return out


# A dotted key: non-empty parts, no spaces (`train.epochs`, `train.params.lr`, `train.args[0]`).
_KEY = re.compile(r"^[^\s.=]+(\.[^\s.=]+)*$")


def _check_key(key: str, item: str | None = None) -> None:
    """An override's key (`item`: the key=value string it came from; None: a mapping's key, where spaces may be
    part of a train.params name)."""
    where, example = (f"override {item!r}", "train.epochs=3") if item else ("override key", "{'train.epochs': 3}")
    if not key.strip():
        raise ConfigError(f"{where}: the key is empty: name a dotted key, e.g. {example}")
    if "" in key.split("."):
        raise ConfigError(f"{where}: the key {key!r} has an empty part (a leading, trailing or doubled '.'): write "
                          f"a dotted key, e.g. {example}")
    if item and not _KEY.match(key):
        raise ConfigError(f"{where}: the key {key!r} has spaces: write key=value with no spaces, e.g. {example}")


def _overrides_layer(overrides: Sequence[str] | Mapping[str, Any]):
    if isinstance(overrides, str):
        raise ConfigError(f"overrides ({overrides!r}) is a single string: pass a list of key=value strings, "
                          f"e.g. [{overrides!r}], or a {{dotted.key: value}} mapping")
    if isinstance(overrides, Mapping):
        layer = OmegaConf.create()
        for key, value in overrides.items():
            _check_key(str(key))
            OmegaConf.update(layer, key, value, force_add=True)
        _check_shapes(layer)
        return layer
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value: write e.g. train.epochs=3")
        key, _, value = item.partition("=")
        _check_key(key, item)
        try:
            OmegaConf.from_dotlist([item])  # which one, if the values do not all parse
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: the value {value!r} is not valid YAML ({_yaml_problem(e)}): fix "
                              "it, or quote it to pass it as a string") from None
    layer = OmegaConf.from_dotlist(list(overrides))
    _check_shapes(layer, {k.strip(): v for k, _, v in (item.partition("=") for item in overrides)})
    return layer


def _check_shapes(layer, texts: Mapping[str, str] | None = None) -> None:
    """A list-valued key (train.args, train.python_path) given a scalar or a mapping, or a mapping (a section,
    train.params, ...) given a scalar or a list: OmegaConf would say only "AnyNode is not a ListConfig", "list is
    not a subclass of TrainConfig" without the key, or raise a TypeError. `texts`: the overrides as typed."""
    raw = OmegaConf.to_container(layer, resolve=False)
    for key, kind in _shaped_keys().items():
        value: Any = raw
        for part in key.split("."):
            value = value.get(part, _ABSENT) if isinstance(value, dict) else _ABSENT
        if value is _ABSENT or (isinstance(value, str) and "${" in value):
            continue  # not given here, or an interpolation (OmegaConf checks what it resolves to)
        text = texts.get(key) if texts is not None else None
        name = key.rpartition(".")[2]
        if kind == "mapping":
            if value is None or isinstance(value, dict):
                continue  # OmegaConf itself names a null key ("field 'train' is not Optional")
            if text is not None:
                raise ConfigError(f"{key}: {text!r} is not a mapping: set the keys under it, e.g. {key}.<name>=value")
            raise ConfigError(f"{key}: {value!r} is not a mapping: put indented `key: value` lines under "
                              f"`{name}:` in YAML ({{}} for none)")
        if isinstance(value, list) or (value is None and kind == "list or null"):
            continue
        if text is not None:
            items = "" if value is None else f'"{text}"' if isinstance(value, dict) else text
            raise ConfigError(f"{key}: {text!r} is not a list: write a list: {key}=[{items}]")
        raise ConfigError(f"{key}: {value!r} is not a list: write a list, e.g. {name}: "
                          "[a, b] in YAML ([] for none), or [a,b] as a key=value override")


_ABSENT = object()
_SHAPED_KEYS: dict[str, str] | None = None


def _shaped_keys() -> dict[str, str]:
    """The schema's list-valued keys (train.args, ...) and mappings (its sections, train.params, ...), parents first:
    key -> "list", "list or null" (cluster.port_range) or "mapping"."""
    global _SHAPED_KEYS
    if _SHAPED_KEYS is None:
        _SHAPED_KEYS = _shapes(Config, "")
    return _SHAPED_KEYS


def _shapes(cls: type, prefix: str) -> dict[str, str]:
    """From the dataclasses' type hints (not OmegaConf's private node API, which changes between its releases)."""
    out = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        optional = type(None) in args
        bare = next((a for a in args if a is not type(None)), hint) if optional else hint
        origin = typing.get_origin(bare) or bare
        key = f"{prefix}{f.name}"
        if origin is list:
            out[key] = "list or null" if optional else "list"
        elif origin is dict:
            out[key] = "mapping"
        elif dataclasses.is_dataclass(bare):
            out[key] = "mapping"
            out.update(_shapes(bare, f"{key}."))
    return out


def _one_line(e: OmegaConfBaseException) -> str:
    # OmegaConf's first line already names the key and suggests spellings; its extra lines
    # (full_key, object_type) repeat it. Keep one line, with the full key made explicit, and add the fix
    # where OmegaConf gives none.
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    full_key = getattr(e, "full_key", None)
    if full_key and full_key not in first:
        first = f"{full_key}: {first}"
    first = re.sub(r"\s+", " ", first)
    kind = re.search(r"could not be converted to (Integer|Float)$", first)
    if isinstance(e, ValidationError) and kind and full_key:
        first += f": write {number_wanted(full_key, kind.group(1) == 'Integer')}"
    elif isinstance(e, ValidationError) and ("is not Optional" in first or "Incompatible value 'None'" in first):
        first += ": it cannot be null: give it a value, or leave it out for its default"
    elif isinstance(e, ValidationError) and "is not a valid bool" in first:
        first += ": write true or false"
    elif isinstance(e, ConfigKeyError) and "Did you mean" not in first and dataclasses.is_dataclass(
            getattr(e, "object_type", None)):
        first += f": the keys there are {', '.join(f.name for f in dataclasses.fields(e.object_type))}"
    return first


def to_dict(cfg: Config) -> dict[str, Any]:
    """Plain-python view of a Config (enums as their YAML spelling)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True)


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
