"""The one `raytf` command (raytf issue 73): its help lists its subcommands, `--version` is the package's one
version (the distribution's metadata reads the same source), `raytf init` writes a starter project that loads as a
valid config and refuses to overwrite one, 0.1's `raytf CONFIG` still launches while saying the new form, and
0.1's `raytf.sweep(config, grid)` still sweeps with a DeprecationWarning. Pure: nothing here launches."""

import ast
import warnings

import pytest
import tomllib

import raytf
from raytf import cli
from raytf.api import sweep as sweep_module
from tests.conftest import ROOT


def test_help_lists_the_subcommands_and_version_is_the_one_source(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: raytf [-h] [--version] COMMAND ...")
    for name in ("launch", "runs", "init"):
        assert f"\n    {name} " in out, out
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"raytf {raytf.__version__} (raytf-trainer)"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["name"] == "raytf-trainer" and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "raytf._version.__version__"}
    assert project["project"]["scripts"] == {"raytf": "raytf.cli:main"}
    # The version is a literal setuptools reads without importing raytf, and the changelog's newest release.
    tree = ast.parse((ROOT / "raytf" / "_version.py").read_text())
    (literal,) = [n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "__version__"]
    assert literal == raytf.__version__
    assert f"## [{raytf.__version__}] - " in (ROOT / "CHANGELOG.md").read_text()


def test_init_writes_a_starter_project_that_is_a_valid_config_and_never_overwrites(tmp_path, capsys):
    assert cli.main(["init", str(tmp_path / "p")]) == 0
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["raytf.yaml", "train.py"]
    assert f"cd {tmp_path / 'p'} && raytf launch raytf.yaml" in capsys.readouterr().out
    cfg = raytf.load_config(tmp_path / "p" / "raytf.yaml")
    assert cfg.train.entrypoint == "train:train" and cfg.cluster.num_workers == 2 and cfg.ray.address is None
    assert cfg.storage.path == "./runs"
    compile((tmp_path / "p" / "train.py").read_text(), "train.py", "exec")
    (tmp_path / "p" / "train.py").write_text("# mine\n")
    assert cli.main(["init", str(tmp_path / "p")]) == 2  # (one line, nothing overwritten)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already there" in err and "--force" in err
    assert (tmp_path / "p" / "train.py").read_text() == "# mine\n"
    assert cli.main(["init", str(tmp_path / "p"), "--force"]) == 0
    assert "def train(ctx)" in (tmp_path / "p" / "train.py").read_text()


def test_the_old_command_still_launches_saying_the_new_form(monkeypatch, capsys):
    from raytf import launch

    calls = []
    monkeypatch.setattr(launch, "main", lambda argv, prog: calls.append((argv, prog)) or 0)
    assert cli.main(["conf/local.yaml", "train.epochs=1"]) == 0
    assert calls == [(["conf/local.yaml", "train.epochs=1"], "raytf launch")]
    err = capsys.readouterr().err
    assert "deprecated since 0.2 and goes in 0.3" in err and "`raytf launch conf/local.yaml ...`" in err
    assert cli.main(["launch", "conf/local.yaml"]) == 0 and calls[-1] == (["conf/local.yaml"], "raytf launch")
    assert capsys.readouterr().err == ""
    # Options first, as 0.1's launcher took them; a mistyped subcommand is a usage error naming the commands.
    assert cli.main(["--quiet", "conf/local.yaml"]) == 0 and calls[-1] == (["--quiet", "conf/local.yaml"],
                                                                           "raytf launch")
    assert "`raytf launch conf/local.yaml ...`" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["lanch", "x.yaml"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "invalid choice: 'lanch'" in err and "launch" in err and "init" in err
    assert len(calls) == 3


def test_the_old_positional_grid_of_sweep_still_sweeps_with_a_deprecation_warning():
    grid = {"train.epochs": [1, 2], "train.params.learning_rate": (0.1, 0.01)}
    with pytest.warns(DeprecationWarning, match=r"space=: raytf\.sweep\(config, space=\{\.\.\.\}\)"):
        space, overrides = sweep_module.grid_given_as_overrides(grid)
    assert space == grid and overrides is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for not_a_grid in ({"train.epochs": 2}, ["train.epochs=2"], None, {}):
            with pytest.raises(TypeError, match=r"raytf\.sweep\(\) needs space="):
                sweep_module.grid_given_as_overrides(not_a_grid)
    # tune.grid_search's form is a grid too; a key whose value is a list is an override, never swept.
    with pytest.warns(DeprecationWarning):
        assert sweep_module.grid_given_as_overrides({"train.epochs": {"grid_search": [1, 2]}})[0]
    with pytest.raises(TypeError, match=r"train\.args take a list"):
        sweep_module.grid_given_as_overrides({"train.args": ["--x", "1"]})
    # Through raytf.sweep itself: the warning, then the config's own check (nothing runs: the key is wrong).
    with pytest.warns(DeprecationWarning), pytest.raises(raytf.ConfigError, match="no_such_key"):
        raytf.sweep({"no_such_key": 1}, {"train.epochs": [1, 2]})


def test_the_old_cfg_keyword_still_works_with_a_deprecation_warning_pointing_at_the_caller():
    """0.1's fit, sweep and scaling took their config as `cfg=`; `config=` since 0.2. The warning points at the
    caller's line; nothing runs here (the key is wrong: the config's own check raises). (raytf.fit, shimmed the same
    way, connects to Ray before it checks the config: its keyword is refused here only when given twice.)"""
    for call in (lambda: raytf.sweep(cfg={"no_such_key": 1}, space={"train.epochs": [1]}),
                 lambda: raytf.scaling(cfg={"no_such_key": 1}, workers=[1])):
        with pytest.warns(DeprecationWarning, match=r"\(cfg=\.\.\.\) is deprecated since raytf 0\.2") as seen, \
                pytest.raises(raytf.ConfigError, match="no_such_key"):
            call()
        assert seen[0].filename == __file__
    with pytest.raises(TypeError, match="give the config once"):
        raytf.fit({"train": {}}, cfg={"train": {}})
    with pytest.warns(DeprecationWarning) as seen, pytest.raises(raytf.ConfigError):
        raytf.sweep({"no_such_key": 1}, {"train.epochs": [1, 2]})
    assert seen[0].filename == __file__  # (the positional grid's warning too)
