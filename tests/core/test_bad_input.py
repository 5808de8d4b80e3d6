"""Malformed input (issue 19, point 7): one line naming the file or key, the bad value and the fix; a ConfigError
from the Python API and exit code 2 from `python -m raytf.launch`, never a traceback, and nothing started.
Pure: no Ray, no TensorFlow (the CLI runs with a `ray` that cannot be imported)."""

import copy
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import types
import typing

import pytest

import raytf
from raytf import runs
from raytf.config import Config, load_config
from raytf.config.rules import RANGES, validate
from raytf.errors import ConfigError
from tests.conftest import ROOT

BASE = {"train": {"entrypoint": "examples.keras_cnn:train"}}


def _error(source, overrides=None) -> str:
    """load_config's ConfigError: one line, raised without a chained exception."""
    with pytest.raises(ConfigError) as info:
        load_config(source, overrides)
    e = info.value
    assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__), repr(e.__context__)
    message = str(e)
    assert "\n" not in message and message.strip() == message, message
    return message


def _write(tmp_path, data: bytes | str, name: str = "bad.yaml"):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


# 1. YAML that does not parse: the file, the line and column, how to fix it.

def test_yaml_syntax_error_names_the_file_line_and_column(tmp_path):
    path = _write(tmp_path, "train:\n  entrypoint: [examples.keras_cnn:train\n  epochs: 2\n")
    message = _error(path)
    assert str(path) in message and "is not valid YAML" in message
    assert "at line 3, column 9" in message and "from line 2, column 15" in message
    assert "fix the syntax there" in message


def test_yaml_duplicate_key_and_tab_name_the_line(tmp_path):
    assert "found duplicate key epochs at line 3" in _error(_write(tmp_path, "train:\n  epochs: 1\n  epochs: 2\n"))
    assert "at line 2, column 1" in _error(_write(tmp_path, "train:\n\tepochs: 1\n"))


# 2. A top level that is not a mapping.

@pytest.mark.parametrize(("text", "got"), [("- a\n- b\n", "a list"), ("hello\n", "a single value ('hello')"),
                                           ("3\n", "a single value ('3')")])
def test_top_level_must_be_a_mapping(tmp_path, text, got):
    path = _write(tmp_path, text)
    message = _error(path)
    assert message.startswith(f"config file {str(path)!r} holds {got} at its top level, not a mapping: ")
    assert "train:" in message


def test_a_section_that_is_not_a_mapping_names_its_key(tmp_path):
    assert _error(_write(tmp_path, "train: [1, 2]\n")).startswith("train: [1, 2] is not a mapping: put indented")
    assert _error({"train": {"entrypoint": "a.b:c", "params": 5}}).startswith("train.params: 5 is not a mapping")
    assert _error(BASE, ["train.params=5"]) == ("train.params: '5' is not a mapping: set the keys under it, e.g. "
                                                "train.params.<name>=value")


def test_an_empty_file_is_the_defaults(tmp_path):
    assert "train.entrypoint is empty" in _error(_write(tmp_path, ""))  # not a file error: the defaults apply


# 3. Not UTF-8.

def test_binary_file_is_not_utf8(tmp_path):
    path = _write(tmp_path, b"train:\n  epochs: 1\n\xff\xfe\x00\x01", name="model.bin")
    message = _error(path)
    assert message == (f"config file {str(path)!r} is not UTF-8 text (byte 0xff at line 3): pass a YAML file, "
                       "saved as UTF-8")


# 4. Malformed key=value overrides.

OVERRIDES = [
    ("train.epochs", "override 'train.epochs' is not key=value: write e.g. train.epochs=3"),
    ("=5", "override '=5': the key is empty: name a dotted key, e.g. train.epochs=3"),
    (" =5", "override ' =5': the key is empty"),
    ("..x=1", "override '..x=1': the key '..x' has an empty part (a leading, trailing or doubled '.')"),
    ("train..epochs=1", "the key 'train..epochs' has an empty part"),
    ("train.epochs.=1", "the key 'train.epochs.' has an empty part"),
    ("train. epochs=1", "the key 'train. epochs' has spaces"),
    ("train.epochs=[1", "override 'train.epochs=[1': the value '[1' is not valid YAML"),
    ("nonexist=1", "Key 'nonexist' not in 'Config': the keys there are ray, cluster, train,"),
    ("train.epoch=1", "Did you mean: 'epochs'?"),
    ("train.epochs=", "train.epochs: Incompatible value 'None' for field of type 'int': it cannot be null"),
    ("checkpoint.resume=maybe", "checkpoint.resume: Value 'maybe' is not a valid bool (type str): write true or false"),
]


@pytest.mark.parametrize(("override", "expected"), OVERRIDES, ids=[o for o, _ in OVERRIDES])
def test_malformed_override(override, expected):
    assert expected in _error(BASE, [override])


def test_overrides_as_one_string_or_with_an_empty_mapping_key():
    assert _error(BASE, "train.epochs=3").startswith("overrides ('train.epochs=3') is a single string: pass a list")
    assert _error(BASE, {"": 3}).startswith("override key: the key is empty")


# 5. NaN and infinity, and every numeric key's range.

@pytest.mark.parametrize(("override", "expected"), [
    ("train.epochs=nan", "train.epochs: Value 'nan' of type 'str' could not be converted to Integer: write an "
                         "integer at least 1"),
    ("train.epochs=1e400", "write an integer at least 1"),
    ("failure.hang_timeout_s=inf", "failure.hang_timeout_s (inf) must be a finite number above 0 (seconds), e.g. 300"),
    ("failure.hang_timeout_s=-.inf", "failure.hang_timeout_s (-inf) must be a finite number above 0"),
    ("storage.min_upload_mib_s=nan", "storage.min_upload_mib_s (nan) must be a finite number above 0 (MiB/s)"),
    ("cluster.worker.cpus=nan", "cluster.worker.cpus (nan) must be a finite number 0 or more, e.g. 1"),
    ("cluster.worker.custom.accel=inf", "cluster.worker.custom.accel (inf) must be a finite number above 0"),
    ("failure.hang_timeout_s=abc", "could not be converted to Float: write a finite number above 0 (seconds)"),
])
def test_nan_and_inf_name_the_key_and_the_range(override, expected):
    assert expected in _error(BASE, [override])


def test_nan_in_yaml(tmp_path):
    path = _write(tmp_path, "train:\n  entrypoint: examples.keras_cnn:train\nstorage:\n  min_upload_mib_s: .nan\n")
    assert _error(path) == "storage.min_upload_mib_s (nan) must be a finite number above 0 (MiB/s), e.g. 1.0"


def _numeric_keys(cls=Config, prefix=""):
    """(key, is a float) for each int or float field of the schema, optional or not."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            yield from _numeric_keys(kind, f"{prefix}{f.name}.")
            continue
        options = set(typing.get_args(kind)) if typing.get_origin(kind) in (typing.Union, types.UnionType) else {kind}
        if options & {int, float}:
            yield f"{prefix}{f.name}", float in options


NUMERIC = sorted(_numeric_keys())


def test_every_numeric_key_has_a_range():
    assert {k for k, _ in NUMERIC} == set(RANGES)


@pytest.mark.parametrize(("key", "is_float"), NUMERIC, ids=[k for k, _ in NUMERIC])
def test_every_numeric_key_rejects_nan_and_inf(key, is_float):
    message = _error(BASE, [f"{key}=nan"])
    wanted = "a finite number" if is_float else "an integer"
    assert message.startswith(key) and "nan" in message and f"{wanted} {RANGES[key].text}".strip() in message, message
    # A Config built in Python and given to raytf.fit is checked by the same rule (driver.run validates it).
    cfg = copy.deepcopy(_DEFAULTS)
    section, _, name = key.rpartition(".")
    node = cfg
    for part in section.split("."):
        node = getattr(node, part)
    setattr(node, name, math.inf)
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)} \(inf\) must be a finite number"):
        validate(cfg)


_DEFAULTS = load_config(BASE)


# 6. A sweep that would run no trial, or fail every one: refused before anything starts.

@pytest.mark.parametrize(("overrides", "expected"), [
    (["sweep.space={train.epochs: [1, 2]}", "sweep.num_samples=0"],
     "sweep.num_samples (0) must be at least 1 (0 would run no trial)"),
    (["sweep.space={train.epochs: []}"], "sweep.space 'train.epochs' ([]) has no values, so the sweep would run no "
                                         "trial: give at least one"),
    (["sweep.space={train.epochs: {grid_search: []}}"], "has no values"),
    (["sweep.space={train.epochs: 3}"], "sweep.space 'train.epochs' (3) must be a list of values, e.g. [1, 2]"),
    (["sweep.space={train.epochs: [1]}", "sweep.max_concurrent=0"], "sweep.max_concurrent (0) must be at least 1"),
])
def test_sweep_section_that_runs_no_trial(overrides, expected):
    assert expected in _error(BASE, overrides)


@pytest.mark.parametrize(("space", "kwargs", "expected"), [
    ({"train.epochs": [1, 2]}, {"num_samples": 0}, "num_samples (0) must be an integer at least 1 (0 would run"),
    ({"train.epochs": [1, 2]}, {"max_concurrent": 0}, "max_concurrent (0) must be an integer at least 1"),
    ({}, {}, "sweep space is empty: map dotted config keys to lists of values"),
    ({"train.epochs": []}, {}, "sweep space 'train.epochs' ([]) has no values"),
    ({"train.epochs": 3}, {}, "must be a list of values or a Ray Tune domain"),
    ({"train.epoch": [1, 2]}, {}, "sweep space key 'train.epoch': train.epoch: Key 'epoch' not in 'TrainConfig'. "
                                  "Did you mean: 'epochs'?"),
])
def test_raytf_sweep_refuses_before_ray_is_imported(space, kwargs, expected):
    with pytest.raises(ConfigError) as info:
        raytf.sweep(BASE, space=space, **kwargs)
    assert expected in str(info.value) and "\n" not in str(info.value)
    assert "ray" not in sys.modules  # nothing started; the pure tier's fixture checks the same


def test_raytf_sweep_of_a_bad_file(tmp_path):
    with pytest.raises(ConfigError, match="is not valid YAML"):
        raytf.sweep(_write(tmp_path, "train: [\n"), space={"train.epochs": [1]})


# 7. The config path missing, or a directory.

def test_missing_file_and_directory(tmp_path):
    assert _error(tmp_path / "nope.yaml") == (f"config file {str(tmp_path / 'nope.yaml')!r} not found: pass the "
                                              "path of a YAML file")
    assert _error(tmp_path) == f"config file {str(tmp_path)!r} is a directory: pass the path of a YAML file"
    assert _error(ROOT / "conf").endswith(f"is a directory: pass the path of a YAML file, e.g. {ROOT / 'conf'}/"
                                          f"{sorted(p.name for p in (ROOT / 'conf').glob('*.yaml'))[0]}")


# 8. cluster.port_range: two integers, 1024 <= low <= high <= 65535, room for every task that may share a host.

_PORT_FIX = "must be [low, high]: two integers, 1024 <= low <= high <= 65535 (e.g. [20000, 20099]), or null"


@pytest.mark.parametrize(("value", "expected"), [
    ("[20000]", f"cluster.port_range ([20000]) {_PORT_FIX}"),
    ("[20000,20001,20002]", f"cluster.port_range ([20000, 20001, 20002]) {_PORT_FIX}"),
    ("[]", f"cluster.port_range ([]) {_PORT_FIX}"),
    ("[80,90]", f"cluster.port_range ([80, 90]) {_PORT_FIX}"),
    ("[30000,20000]", f"cluster.port_range ([30000, 20000]) {_PORT_FIX}"),
    ("[20000,70000]", f"cluster.port_range ([20000, 70000]) {_PORT_FIX}"),
    ("[20000,x]", "cluster.port_range[1]: Value 'x' of type 'str' could not be converted to Integer: write an "
                  "integer"),
    ("20000", "cluster.port_range: '20000' is not a list: write a list: cluster.port_range=[20000]"),
    ("[20000,20000]", "cluster.port_range ([20000, 20000]) holds 1 port(s), but the run's 2 tasks may all land on "
                      "one host (cluster.placement_strategy=PACK): widen it to at least 2 ports, e.g. [20000, 20001]"),
    ("[65535,65535]", "widen it to at least 2 ports, e.g. [65534, 65535]"),
])
def test_port_range(value, expected):
    assert expected in _error(BASE, [f"cluster.port_range={value}"])


def test_port_range_counts_every_task_that_may_share_a_host():
    ps = ["cluster.strategy=parameter_server", "cluster.num_ps=2", "cluster.evaluator.enabled=true",
          "train.eval_entrypoint=examples.keras_cnn:evaluate"]  # chief, 2 workers, 2 ps, evaluator
    assert "the run's 6 tasks" in _error(BASE, [*ps, "cluster.port_range=[20000,20004]"])
    for ok in (["cluster.port_range=[20000,20005]"], ["cluster.port_range=[20000,20000]",
                                                       "cluster.placement_strategy=STRICT_SPREAD"]):
        assert load_config(BASE, [*ps, *ok]).cluster.port_range[0] == 20000
    assert load_config(BASE, ["cluster.port_range=null"]).cluster.port_range is None


# The same through the CLI: exit code 2, one line on stderr, no traceback, before Ray is even imported.

@pytest.fixture(scope="module")
def no_ray(tmp_path_factory):
    """A PYTHONPATH entry whose `ray` cannot be imported: a case that got as far as starting Ray fails loudly."""
    root = tmp_path_factory.mktemp("no_ray")
    (root / "ray").mkdir()
    (root / "ray" / "__init__.py").write_text("raise ImportError('the CLI reached Ray: it should have failed "
                                              "before')\n")
    return root


def _files(tmp_path):
    return {
        "syntax": _write(tmp_path, "train:\n  entrypoint: [x\n  epochs: 2\n", "syntax.yaml"),
        "list": _write(tmp_path, "- a\n", "list.yaml"),
        "scalar": _write(tmp_path, "hello\n", "scalar.yaml"),
        "binary": _write(tmp_path, b"\x89PNG\r\n\x1a\n\x00", "binary.yaml"),
        "nan": _write(tmp_path, "train:\n  entrypoint: examples.keras_cnn:train\nstorage:\n  min_upload_mib_s: .nan\n",
                      "nan.yaml"),
        "missing": tmp_path / "missing.yaml",
        "dir": tmp_path,
        "local": ROOT / "conf/local.yaml",
        "sweep": ROOT / "conf/sweep.yaml",
    }


CLI = [  # one or two per kind of mistake (the variants are tested through load_config above)
    ("syntax", [], "is not valid YAML: "),
    ("list", [], "holds a list at its top level, not a mapping"),
    ("scalar", [], "holds a single value ('hello') at its top level"),
    ("binary", [], "is not UTF-8 text (byte 0x89 at line 1)"),
    ("local", ["train.epochs"], "override 'train.epochs' is not key=value"),
    ("local", ["..x=1"], "has an empty part"),
    ("local", ["nonexist=1"], "Key 'nonexist' not in 'Config': the keys there are"),
    ("local", ["train.epochs=nan"], "write an integer at least 1"),
    ("local", ["failure.hang_timeout_s=inf"], "failure.hang_timeout_s (inf) must be a finite number above 0"),
    ("nan", [], "storage.min_upload_mib_s (nan) must be a finite number above 0"),
    ("local", ["cluster.port_range=[80,90]"], "cluster.port_range ([80, 90]) must be [low, high]: two integers, "
                                              "1024 <= low <= high <= 65535"),
    ("local", ["cluster.port_range=[20000,20000]"], "cluster.port_range ([20000, 20000]) holds 1 port(s)"),
    ("sweep", ["sweep.num_samples=0"], "sweep.num_samples (0) must be at least 1"),
    ("sweep", ["sweep.space={train.epochs: []}"], "has no values"),
    ("sweep", ["sweep.space={train.epoch: [1, 2]}"], "sweep space key 'train.epoch'"),  # checked before Ray too
    ("missing", [], "not found: pass the path of a YAML file"),
    ("dir", [], "is a directory: pass the path of a YAML file"),
]


@pytest.mark.parametrize(("file", "overrides", "expected"), CLI, ids=[f"{f}-{' '.join(o)}" for f, o, _ in CLI])
def test_cli_exits_2_with_one_line(file, overrides, expected, tmp_path, cli):
    path = _files(tmp_path)[file]
    code, _, err = cli("raytf.launch", path, *overrides)  # (in this process: it must not import Ray, see `cli`)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("raytf: config error: ") and expected in lines[0], lines[0]
    if file not in ("local", "sweep", "nan"):
        assert str(path) in lines[0]


def test_cli_in_its_own_process_exits_2_with_one_line_and_never_reaches_ray(tmp_path, no_ray):
    """The cases above run in this process; one as a shell runs it, with a `ray` that cannot be imported."""
    path = _files(tmp_path)["syntax"]
    env = {**os.environ, "PYTHONPATH": str(no_ray)}
    proc = subprocess.run([sys.executable, "-m", "raytf.launch", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert lines[0].startswith("raytf: config error: ") and str(path) in lines[0]


def test_raytf_fit_raises_one_config_error(tmp_path):
    """raytf.fit imports Ray (not starts it) before reading the config: in a child process, not this one."""
    bad = _write(tmp_path, "- a\n")
    code = ("import raytf, json\n"
            "out = []\n"
            f"for source, overrides in [({str(bad)!r}, None), ({BASE!r}, ['train.epochs=nan']), "
            f"({str(tmp_path)!r}, None)]:\n"
            "    try:\n"
            "        raytf.fit(source, overrides)\n"
            "    except raytf.ConfigError as e:\n"
            "        out.append([str(e), e.__cause__ is None and (e.__context__ is None or e.__suppress_context__)])\n"
            "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (list_msg, clean1), (nan_msg, clean2), (dir_msg, clean3) = json.loads(proc.stdout.strip().splitlines()[-1])
    assert clean1 and clean2 and clean3
    assert str(bad) in list_msg and "not a mapping" in list_msg
    assert "train.epochs" in nan_msg and "at least 1" in nan_msg
    assert "is a directory" in dir_msg


# `python -m raytf.runs`: a storage path that is a file (exit 2); a damaged result.json is named (exit 1, a run
# that cannot be read) and skipped by `ls`.

def test_runs_ls_of_a_file_exits_2(tmp_path, capsys):
    path = _write(tmp_path, "x", "not_a_dir")
    assert runs.main(["ls", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"raytf.runs: {path} is a file, not a directory of runs: pass the directory the runs are in "
                   "(storage.path), e.g. ./runs"]


@pytest.mark.parametrize(("content", "why"), [(b"\xff\xfe", "UnicodeDecodeError"), (b'{"run": ', "JSONDecodeError"),
                                              (b"[1, 2]", "a JSON list")])
def test_runs_damaged_result_json_is_named(tmp_path, capsys, content, why):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "result.json").write_bytes(content)
    assert runs.main(["ls", str(tmp_path / "runs")]) == 0  # skipped, not a traceback
    assert "no runs under" in capsys.readouterr().out
    assert runs.main(["show", "r1", "--storage", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{run / 'result.json'} is not a run summary ({why}" in err[0], err
    assert "point RUN at another run" in err[0]
