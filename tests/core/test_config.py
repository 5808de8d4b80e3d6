"""Config loading, overrides and validation (pure: no Ray, no TF)."""

import re
import shlex
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from raytf.config import Collective, Config, PlacementStrategy, Strategy, load_config, to_yaml
from raytf.errors import ConfigError
from tests.conftest import ROOT

BASE = {"train": {"entrypoint": "examples.keras_cnn:train"}}


def test_local_yaml_loads_with_overrides():
    cfg = load_config(ROOT / "conf/local.yaml",
                      ["cluster.num_workers=3", "train.epochs=5", "run.name=exp1", "train.params.lr=0.5"])
    assert isinstance(cfg, Config)
    assert cfg.cluster.num_workers == 3
    assert cfg.train.epochs == 5
    assert cfg.run.name == "exp1"
    assert cfg.train.params["lr"] == 0.5
    assert cfg.cluster.strategy is Strategy.multi_worker_mirrored
    assert cfg.ray.address is None
    assert cfg.storage.path == "./runs"


def test_dict_source_and_mapping_overrides():
    cfg = load_config(BASE, {"cluster.placement_strategy": "STRICT_SPREAD", "cluster.collective": "ring",
                             "cluster.worker.custom.accel": 2})
    assert cfg.cluster.placement_strategy is PlacementStrategy.STRICT_SPREAD
    assert cfg.cluster.collective is Collective.ring
    assert cfg.cluster.worker.custom == {"accel": 2.0}


def test_user_params_pass_through_untouched():
    cfg = load_config({**BASE, "train": {**BASE["train"], "params": {"layers": [64, 32], "opt": {"name": "adam"}}}})
    assert cfg.train.params == {"layers": [64, 32], "opt": {"name": "adam"}}


def test_config_round_trips_through_yaml(tmp_path):
    cfg = load_config(BASE, ["run.name=x", "cluster.num_workers=4"])
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml(cfg))
    assert load_config(path) == cfg


def test_existing_config_as_source():
    cfg = load_config(BASE, ["train.epochs=7"])
    again = load_config(cfg, ["cluster.num_workers=5"])
    assert again.train.epochs == 7 and again.cluster.num_workers == 5


BAD = [
    (["cluster.num_worker=3"], "cluster.num_worker", "num_workers"),  # typo: OmegaConf's "did you mean"
    (["cluster.num_workers=abc"], "cluster.num_workers", "abc"),
    (["cluster.strategy=mirrorred"], "cluster.strategy", "multi_worker_mirrored"),
    (["cluster.placement_strategy=spread"], "cluster.placement_strategy", "STRICT_SPREAD"),
    (["cluster.num_workers=0"], "cluster.num_workers", "(0)"),
    (["train.epochs=0"], "train.epochs", "(0)"),
    (["train.batch_size=-4"], "train.batch_size", "-4"),
    (["train.steps_per_epoch=0"], "train.steps_per_epoch", "(0)"),
    (["train.entrypoint=examples.keras_cnn"], "train.entrypoint", "package.module:function"),
    (["train.entrypoint="], "train.entrypoint", ""),
    (["cluster.worker.cpus=-1"], "cluster.worker.cpus", "-1"),
    (["cluster.worker.cpus=0"], "cluster.worker", "reserves nothing"),
    (["cluster.collective=nccl"], "cluster.collective", "GPUs"),
    (["cluster.placement_timeout_s=0"], "cluster.placement_timeout_s", "(0.0)"),
    (["checkpoint.keep_last=-1"], "checkpoint.keep_last", "-1"),
    (["run.name=a/b"], "run.name", "a/b"),
    ([f"run.name={'x' * 300}"], "run.name", "300 characters"),
    (["ray.address=nowhere"], "ray.address", "nowhere"),
    (["storage.path="], "storage.path", ""),
    (["storage.min_upload_mib_s=0"], "storage.min_upload_mib_s", "(0.0)"),
    (["nonsense=1"], "nonsense", ""),
    (["train.epochs"], "train.epochs", "key=value"),
    (["cluster.strategy=parameter_server"], "cluster.num_ps", "(0)"),
    (["cluster.strategy=parameter_server", "cluster.num_ps=1", "cluster.collective=ring"], "cluster.collective",
     "parameter_server"),
    (["cluster.strategy=parameter_server", "cluster.num_ps=1", "cluster.ps.max_shards=0"], "cluster.ps.max_shards",
     "(0)"),
    (["cluster.strategy=parameter_server", "cluster.num_ps=1", "cluster.ps.variable_partitioner=fixed"],
     "cluster.ps.variable_partitioner", "min_size_max_shards"),
    (["cluster.strategy=parameter_server", "cluster.num_ps=1", "cluster.chief.cpus=-2"], "cluster.chief.cpus", "-2"),
    (["cluster.num_ps=2"], "cluster.num_ps", "parameter_server"),
    (["cluster.ps.variable_partitioner=min_size_max_shards"], "cluster.ps.variable_partitioner", "parameter_server"),
    (["cluster.evaluator.enabled=true"], "train.eval_entrypoint", "empty"),
    (["cluster.strategy=mirrored"], "cluster.num_workers", "(2)"),
    (["cluster.strategy=central_storage", "cluster.num_workers=1", "cluster.collective=ring"], "cluster.collective",
     "mirrored"),
    (["cluster.cross_device_ops=hierarchical_copy"], "cluster.cross_device_ops", "mirrored"),
    (["cluster.strategy=mirrored", "cluster.num_workers=1", "cluster.cross_device_ops=nccl"],
     "cluster.cross_device_ops", "GPUs"),
    (["train.eval_entrypoint=m:evaluate"], "cluster.evaluator.enabled", "m:evaluate"),
    (["cluster.evaluator.enabled=true", "train.eval_entrypoint=nocolon"], "train.eval_entrypoint", "nocolon"),
]


@pytest.mark.parametrize(("overrides", "key", "detail"), BAD, ids=[b[0][0] for b in BAD])
def test_bad_config_gives_one_line_error_naming_the_key(overrides, key, detail):
    with pytest.raises(ConfigError) as info:
        load_config(BASE, overrides)
    message = str(info.value)
    assert "\n" not in message
    assert key in message
    assert detail in message


def test_ps_local_yaml_loads():
    cfg = load_config(ROOT / "conf/ps_local.yaml", ["cluster.ps.variable_partitioner=min_size_max_shards"])
    assert cfg.cluster.strategy is Strategy.parameter_server
    assert (cfg.cluster.num_ps, cfg.cluster.num_workers) == (1, 2)
    assert cfg.cluster.ps.cpus == 0.5 and cfg.cluster.chief.cpus == 0.5


@pytest.mark.parametrize("name", ["two_node.yaml", "two_node_ps.yaml", "local.yaml", "ps_local.yaml"])
def test_shipped_configs_are_valid(name):
    cfg = load_config(ROOT / "conf" / name)
    if name.startswith("two_node"):
        assert cfg.ray.address == "auto" and cfg.cluster.worker.gpus == 1


def test_missing_yaml_file():
    with pytest.raises(ConfigError, match="not found"):
        load_config("conf/does-not-exist.yaml")


def test_defaults_need_an_entrypoint():
    with pytest.raises(ConfigError, match=r"train\.entrypoint"):
        load_config()


@pytest.mark.parametrize("args", [["conf/local.yaml", "cluster.num_worker=2"],
                                  ["conf/local.yaml", "train.epochs=zero"],
                                  ["conf/nope.yaml"],
                                  ["conf/local.yaml", "--scaling", "1,two"],
                                  ["conf/sweep.yaml", "--scaling", "1,2"]])
def test_cli_bad_config_exits_2_with_one_line(args, cli):
    code, _, err = cli("raytf.launch", *args)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("raytf: config error:"), err


def test_cli_usage_error_exits_2():
    proc = subprocess.run([sys.executable, "-m", "raytf.launch"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2


# A list-valued key given a scalar: OmegaConf alone says "AnyNode is not a ListConfig" (a TypeError for a mapping).
LIST_OVERRIDES = [
    ("train.args=--epochs,3", "train.args: '--epochs,3' is not a list: write a list: train.args=[--epochs,3]"),
    ("train.args=--epochs", "write a list: train.args=[--epochs]"),
    ("train.args=", "write a list: train.args=[]"),
    ("train.args={checkpoint_dir}", 'write a list: train.args=["{checkpoint_dir}"]'),
    ("train.python_path=src,lib", "train.python_path: 'src,lib' is not a list: write a list: "
                                  "train.python_path=[src,lib]"),
]


@pytest.mark.parametrize(("override", "message"), LIST_OVERRIDES, ids=[o for o, _ in LIST_OVERRIDES])
def test_a_list_key_given_a_scalar_says_write_a_list(override, message):
    script = ["train.entrypoint=", "train.script=examples/mwms_script.py"]
    with pytest.raises(ConfigError) as info:
        load_config(BASE, [*script, override])
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("given", [{"args": "--epochs 3"}, {"args": {"a": 1}}, {"args": None},
                                   {"python_path": "src"}])
def test_a_list_key_given_a_scalar_in_yaml_or_a_dict_says_write_a_list(given, tmp_path):
    (name, value), = given.items()
    key = f"train.{name}"
    script = {"script": "examples/mwms_script.py"}
    path = tmp_path / "c.yaml"
    path.write_text(OmegaConf.to_yaml({"train": {**script, name: value}}))
    for source, overrides in [(path, None), ({"train": {**script, name: value}}, None),
                              ({"train": script}, {key: value})]:
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)}: .* is not a list: write a list"):
            load_config(source, overrides)


def test_lists_still_load():
    cfg = load_config({"train": {"script": "x.py"}}, ["train.args=[--epochs,3]", "train.python_path=[src]"])
    assert cfg.train.args == ["--epochs", "3"] and cfg.train.python_path == ["src"]
    assert load_config({"train": {"script": "x.py", "args": ["--epochs", 3]}}).train.args == ["--epochs", "3"]
    assert load_config({"train": {"script": "x.py"}}, ["train.args=[]"]).train.args == []


def test_cli_list_key_given_a_scalar_exits_2_with_the_fix(cli):
    code, _, err = cli("raytf.launch", "conf/script.yaml", "train.args=--epochs,3")
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == ["raytf: config error: train.args: '--epochs,3' is not a list: write a list: "
                     "train.args=[--epochs,3]"], err


def test_the_ps_script_docstrings_command_parses():
    """examples/ps_script.py's docstring shows a command: as a shell splits it, raytf's loader takes it."""
    import ast

    doc = ast.get_docstring(ast.parse((ROOT / "examples/ps_script.py").read_text()))
    command = doc.split("With raytf:", 1)[1].replace("\\\n", " ").strip()
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "raytf.launch"]
    cfg = load_config(ROOT / argv[3], argv[4:])
    assert cfg.train.script == "examples/ps_script.py"
    assert cfg.train.args == ["--working-dir", "{checkpoint_dir}"]


def test_a_run_name_with_a_trailing_newline_is_refused():
    """Through the API a name can hold what a command line cannot: a trailing newline matched `$` (raytf issue 71)."""
    with pytest.raises(ConfigError, match=r"run.name \('x\\n'\)"):
        load_config({**BASE, "run": {"name": "x\n"}})
