"""How the program reaches the tasks (raytf issue 32): what is shipped and left out, the decision matrix (embedded,
cluster, ray job submit, the user's own working_dir, ray.ship_code=off, a process joined before raytf), where a
task finds train.script and train.python_path, what the tasks check for (read from the source, never run), and
the one-line messages. Pure: no Ray (raytf/_core/shipping.py, raytf/_core/imports.py, and the Ray-free parts of
raytf/_driver/usercode.py and raytf/_task/usercode.py)."""

import json
import textwrap

import pytest

from raytf._core import imports, shipping
from raytf._core.shipping import PACKAGE, PROJECT, SCRIPT, CodeNeeds, Missing, Need
from raytf._core.tasks import TaskInfo
from raytf._driver import usercode
from raytf._task import usercode as task_usercode
from raytf.config import ShipCode, load_config
from raytf.errors import ConfigError

LAUNCH = "/home/me/proj"


# -- what the program imports for certain ---------------------------------------------------------------------------

SOURCE = textwrap.dedent("""
    from __future__ import annotations
    import os, numpy as np
    import sklearn.datasets
    from . import helper
    from ..up import thing
    from .pkg.mod import a, b
    try:
        import horovod
    except ImportError:
        horovod = None
    if TYPE_CHECKING:
        import typing_only

    def train(ctx):
        import pandas
        if ctx.rank:
            import conditional

    def other():
        import not_this

    if __name__ == "__main__":
        import main_only
""")


def test_only_unconditional_imports_count():
    names = [i.module for i in imports.imports_of(SOURCE)]
    assert names == ["os", "numpy", "sklearn.datasets", "", "up", "pkg.mod"]  # (relative ones keep their level)
    assert [i.module for i in imports.imports_of(SOURCE, function="train")][-1] == "pandas"
    assert "main_only" in [i.module for i in imports.imports_of(SOURCE, main=True)]
    everything = {i.module for i in imports.imports_of(SOURCE, main=True, function="train")}
    assert not everything & {"horovod", "typing_only", "conditional", "not_this", "__future__"}
    assert imports.imports_of("def broken(:\n") == []  # its run says why, with its traceback


def test_relative_imports_are_made_absolute_from_the_package():
    rel = imports.imports_of(SOURCE)
    assert imports.absolute(rel[3], "proj.sub") == imports.Import("proj.sub", ("helper",))
    assert imports.absolute(rel[4], "proj.sub") == imports.Import("proj.up", ("thing",))
    assert imports.absolute(rel[5], "proj") == imports.Import("proj.pkg.mod", ("a", "b"))
    assert imports.absolute(rel[4], "proj") is None  # above the top: Python refuses it too
    assert imports.absolute(rel[3], "") is None  # a relative import in a top-level module
    assert imports.top("sklearn.datasets") == "sklearn"


# -- what is shipped, and what the tasks' own runtime_env keeps ----------------------------------------------------

def test_uris_and_local_paths():
    assert shipping.is_uri("s3://bucket/code.zip") and shipping.is_uri("gcs://_ray_pkg_x.zip")
    assert not shipping.is_uri(".") and not shipping.is_uri("/abs/dir") and not shipping.is_uri("C:/x")
    env = {"working_dir": "s3://b/w.zip", "py_modules": ["./lib", "https://x/y.whl"], "pip": ["numpy"],
           "excludes": ["*.csv"], "env_vars": {"A": "1"}}
    assert shipping.local_paths(env, "working_dir") == [] and shipping.local_paths(env, "py_modules") == ["./lib"]
    # An actor takes URIs, never local paths; a py_modules list with one local entry stays with the job whole.
    assert shipping.task_level(env) == {"working_dir": "s3://b/w.zip", "pip": ["numpy"], "env_vars": {"A": "1"}}
    assert shipping.task_level({"working_dir": "."}) == {}


def test_what_is_left_out_of_the_launch_directory():
    out = shipping.ship_excludes(LAUNCH, "./runs", ["env311", ".venv"])
    assert out == [".git", ".venv", "venv", "__pycache__", "/env311/", "/runs/"]
    assert shipping.ship_excludes(LAUNCH, f"file://{LAUNCH}/out/runs")[-1] == "/out/runs/"
    for outside in ("/shared/runs", "s3://bucket/runs", "../runs", LAUNCH):  # nothing of the storage to leave out
        assert shipping.ship_excludes(LAUNCH, outside) == list(shipping.ALWAYS_EXCLUDED)


def _job_env(user=None, job=None, *, embedded=False, ship=ShipCode.auto):
    return shipping.job_env(user or {}, job or {}, embedded=embedded, ship=ship, launch_dir=LAUNCH,
                            excludes=["/runs/"])


def test_the_decision_matrix_before_connecting():
    # Joining a cluster: the launch directory is the job's working_dir, with what is left out.
    joined = _job_env()
    assert joined == shipping.JobEnv({"working_dir": LAUNCH, "excludes": ["/runs/"]}, shipped=LAUNCH)
    # One machine (the tasks see the driver's files), ray.ship_code=off, and under `ray job submit` (the job has its
    # working_dir): nothing shipped, nothing twice.
    assert _job_env(embedded=True) == shipping.JobEnv({})
    assert _job_env(ship=ShipCode.off) == shipping.JobEnv({})
    assert _job_env(job={"working_dir": "gcs://_ray_pkg_1.zip"}) == shipping.JobEnv({})
    # The user's own working_dir (local or a URI) and py_modules go to the job, where Ray takes local paths; raytf
    # ships nothing of its own then. Their excludes go with them (and add to raytf's).
    user = {"working_dir": "./src", "py_modules": ["./lib"], "excludes": ["*.csv"], "pip": ["x"]}
    assert _job_env(user) == shipping.JobEnv({"working_dir": "./src", "py_modules": ["./lib"], "excludes": ["*.csv"]})
    assert _job_env(user, embedded=True).runtime_env["working_dir"] == "./src"
    assert _job_env({"working_dir": "s3://b/c.zip"}).runtime_env == {"working_dir": "s3://b/c.zip"}
    shipped = _job_env({"py_modules": ["./lib"], "excludes": ["*.csv"]})
    assert shipped.shipped == LAUNCH and shipped.runtime_env["excludes"] == ["/runs/", "*.csv"]
    assert _job_env({"excludes": ["*.csv"]}, ship=ShipCode.off) == shipping.JobEnv({})  # nothing uploaded
    # Never the whole machine, nor a home directory (minutes of hashing, then Ray's limit).
    for everything in ("/", "/home/me"):
        with pytest.raises(ConfigError, match=rf"ray.ship_code=auto would ship {everything} "):
            shipping.job_env({}, {}, embedded=False, ship=ShipCode.auto, launch_dir=everything, excludes=[],
                             home="/home/me")
    assert shipping.job_env({}, {}, embedded=False, ship=ShipCode.off, launch_dir="/", excludes=[]).runtime_env == {}
    # Under `ray job submit --working-dir`, a working_dir of the user's too: Ray refuses to merge them; one line.
    with pytest.raises(ConfigError, match=r"ray.runtime_env.working_dir \('./src'\): the Ray job already has its own"):
        _job_env({"working_dir": "./src"}, job={"working_dir": "gcs://_ray_pkg_1.zip"})


def test_a_process_joined_before_raytf_cannot_add_local_paths():
    line = shipping.joined_problem({"working_dir": "."}, {})
    assert "ray.runtime_env.working_dir ('.') has local paths" in line and "ray.init(address=..." in line
    assert "\n" not in line
    assert shipping.joined_problem({"working_dir": "."}, {"working_dir": "gcs://_ray_pkg_1.zip"}) is None
    assert shipping.joined_problem({"working_dir": "s3://b/c.zip"}, {}) is None  # an actor takes a URI
    assert "py_modules" in shipping.joined_problem({"py_modules": ["./lib"]}, {"working_dir": "gcs://x.zip"})


def test_where_the_code_comes_from():
    assert shipping.where(embedded=False, working_dir=True, ship=ShipCode.auto) == shipping.WORKING_DIR
    assert shipping.where(embedded=True, working_dir=True, ship=ShipCode.auto) == shipping.WORKING_DIR
    assert shipping.where(embedded=True, working_dir=False, ship=ShipCode.off) == shipping.EMBEDDED
    assert shipping.where(embedded=False, working_dir=False, ship=ShipCode.off) == shipping.OFF
    assert shipping.where(embedded=False, working_dir=False, ship=ShipCode.auto) == shipping.JOINED


# -- where a task finds train.script and train.python_path -------------------------------------------------------

def _task_path(path, root=LAUNCH, working_dir=True):
    return shipping.task_path(path, launch_dir=LAUNCH, root=root, working_dir=working_dir)


def test_script_and_paths_resolve_in_each_tasks_own_copy():
    # Shipped (raytf's, ray job submit's): relative to the task's copy, wherever its node unpacked it.
    assert _task_path("mwms_script.py") == "mwms_script.py"
    assert _task_path("./scripts/../mwms_script.py") == "mwms_script.py"
    assert _task_path(f"{LAUNCH}/scripts/s.py") == "scripts/s.py"  # the driver's absolute path: into the copy
    assert _task_path(".") == "."
    assert _task_path("/opt/image/s.py") == "/opt/image/s.py"  # baked into the nodes' image: as it is
    assert _task_path("../elsewhere/s.py") == "/home/me/elsewhere/s.py"  # outside what is shipped
    # The user's own local working_dir (./src): paths inside it are relative to its copy.
    assert _task_path("src/train.py", root=f"{LAUNCH}/src") == "train.py"
    # A remote working_dir (a URI): relative paths mean its copy; nothing to relate absolute ones to.
    assert _task_path("train.py", root=None) == "train.py"
    assert _task_path("/opt/s.py", root=None) == "/opt/s.py"
    # No working_dir (one machine; the code at the same path on every node): the launch directory's path.
    assert _task_path("mwms_script.py", working_dir=False) == f"{LAUNCH}/mwms_script.py"
    assert _task_path("/opt/image/s.py", working_dir=False) == "/opt/image/s.py"


def test_the_shipped_root():
    assert shipping.shipped_root({}, {"working_dir": "gcs://x.zip"}, LAUNCH) == LAUNCH  # raytf's; a job's copy
    assert shipping.shipped_root({"working_dir": "./src"}, {"working_dir": "gcs://x.zip"}, LAUNCH) == f"{LAUNCH}/src"
    assert shipping.shipped_root({"working_dir": "s3://b/c.zip"}, {}, LAUNCH) is None
    assert shipping.shipped_root({}, {}, LAUNCH) is None


# -- the one-line messages ---------------------------------------------------------------------------------------

def test_blind_hosts_in_one_line_naming_each_host_and_the_fix():
    key = "train.entrypoint 'usertrain:train'"
    blind = [("198.18.0.3", "worker", 0, [Missing(PROJECT, "usertrain")]),
             ("198.18.0.4", "worker", 1, [Missing(PROJECT, "usertrain")])]
    line = shipping.missing_line(blind, where=shipping.OFF, key=key)
    assert "\n" not in line
    assert ("198.18.0.3 (worker 0) and 198.18.0.4 (worker 1) cannot import 'usertrain' (train.entrypoint "
            "'usertrain:train')") in line
    assert "ray.ship_code=auto" in line and "ray job submit --working-dir ." in line and "install the project" in line
    joined = shipping.missing_line(blind, where=shipping.JOINED, key=key)
    assert "runtime_env={'working_dir': '.'}" in joined
    shipped = shipping.missing_line([("198.18.0.3", "worker", 0, [Missing(PROJECT, "helper", "usertrain.py")])],
                                    where=shipping.WORKING_DIR, key=key)
    assert "cannot import 'helper' (imported by usertrain.py)" in shipped and ".gitignore" in shipped
    script = shipping.missing_line([("198.18.0.3", "worker", 0, [Missing(SCRIPT, "/w/_ray_pkg_1/s.py")])],
                                   where=shipping.WORKING_DIR, key="train.script 's.py'")
    assert "198.18.0.3 (worker 0) cannot see train.script (no file /w/_ray_pkg_1/s.py there)" in script


def test_a_missing_package_names_the_host_and_the_package():
    line = shipping.missing_line([("198.18.0.4", "worker", 1, [Missing(PACKAGE, "sklearn", "usertrain.py")]),
                                  ("198.18.0.4", "chief", 0, [Missing(PACKAGE, "sklearn", "usertrain.py")])],
                                 where=shipping.WORKING_DIR, key="k")
    assert line == ("the program is not on every host: 198.18.0.4 (worker 1, chief 0) has no module 'sklearn' "
                    "(imported by usertrain.py). Fix: install sklearn on every node (or list it in ray.runtime_env's "
                    "pip)")


def test_rays_refusals_in_one_line():
    ray_says = ("Package size (612.40MiB) exceeds the maximum size of 512.00MiB. To exclude large files, add them to "
                "'.gitignore' or '.rayignore' files, or use the 'excludes' option in the runtime_env, ...")
    line = shipping.too_big(ray_says, "ray.ship_code: the launch directory /p")
    assert line.startswith("ray.ship_code: the launch directory /p packs to 612.40MiB, over Ray's limit of 512.00MiB")
    assert ".gitignore" in line and "ray.ship_code=off" in line
    assert shipping.too_big("something else", "x") is None
    setup = ("Failed to set up runtime environment.\nCould not create the actor because its associated runtime env "
             "failed to be created.\n[Node 198.18.0.3] Traceback (most recent call last):\n  File \"x.py\", line 1\n"
             "socket.gaierror: [Errno -2] Name or service not known\nThe above exception was the direct cause\n"
             "urllib3.exceptions.NameResolutionError: Failed to resolve 'bucket.s3.amazonaws.com'\n")
    assert shipping.ray_reason("Failed to set up runtime environment.\nFailed to upload working_dir . to the Ray "
                               "cluster: no such directory.") == ("Failed to upload working_dir . to the Ray cluster: "
                                                                 "no such directory")
    line = shipping.setup_failure(setup)
    assert line.startswith("ray.runtime_env could not be set up on 198.18.0.3: urllib3.exceptions.NameResolutionError: "
                           "Failed to resolve 'bucket.s3.amazonaws.com'. Fix:")
    assert "\n" not in line


# -- the driver: what ray.init is given, and what the tasks check -------------------------------------------------

def _project(tmp_path):
    """A user project: a training module, a helper module of its own, a package, a script."""
    (tmp_path / "usertrain.py").write_text(textwrap.dedent("""
        import numpy as np
        import userhelper
        from mypkg import util
        try:
            import not_installed_anywhere
        except ImportError:
            pass

        def train(ctx):
            import some_missing_package
    """))
    (tmp_path / "userhelper.py").write_text("import json\nimport nowhere_pkg.sub\n")
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("raise RuntimeError('never run by the check')\n")
    (tmp_path / "mypkg" / "util.py").write_text("from . import deeper\n")
    (tmp_path / "mypkg" / "deeper.py").write_text("import yaml\n")
    (tmp_path / "mwms_script.py").write_text("import tensorflow as tf\nimport userhelper\n")
    return tmp_path


def test_the_driver_lists_what_the_program_needs_without_running_it(tmp_path):
    proj = _project(tmp_path)
    needs = usercode.program_modules(entrypoint="usertrain:train", paths=[str(proj)], launch_dir=str(proj))
    assert {(n.module, n.kind) for n in needs} == {
        ("usertrain", PROJECT), ("numpy", PACKAGE), ("userhelper", PROJECT), ("mypkg", PROJECT),
        ("mypkg.util", PROJECT), ("some_missing_package", PACKAGE), ("nowhere_pkg", PACKAGE),
        ("mypkg.deeper", PROJECT), ("yaml", PACKAGE)}
    by = {n.module: n.via for n in needs}
    assert by["usertrain"] == "" and by["nowhere_pkg"] == "userhelper.py" and by["yaml"] == "mypkg/deeper.py"
    script = usercode.program_modules(script_file=str(proj / "mwms_script.py"), paths=[], launch_dir=str(proj))
    assert {(n.module, n.kind) for n in script} >= {("tensorflow", PACKAGE), ("userhelper", PROJECT)}
    (proj / "mypkg" / "__main__.py").write_text("import toml\n")  # `python -m mypkg` runs it
    as_module = usercode.program_modules(module="mypkg", paths=[str(proj)], launch_dir=str(proj))
    assert {n.module for n in as_module} == {"mypkg", "toml"}
    # The image case: the driver has nothing of it; the tasks look for the module itself.
    assert usercode.program_modules(module="baked.train", paths=[], launch_dir=str(proj)) == [
        Need("baked.train", PROJECT)]


def test_a_virtual_environment_in_the_project_is_packages_not_the_program(tmp_path):
    """`python -m venv .venv` in the project: what is installed there is a package (not followed: following
    TensorFlow's imports took seconds before every launch), what the project holds beside it is the program."""
    proj = _project(tmp_path)
    site = proj / ".venv" / "lib" / "python3.11" / "site-packages"
    (site / "bigpkg").mkdir(parents=True)
    (site / "bigpkg" / "__init__.py").write_text("import bigpkg.inner\nimport deep_dependency\n")
    (site / "bigpkg" / "inner.py").write_text("import another_dependency\n")
    (proj / "usesbig.py").write_text("import bigpkg\nimport userhelper\n\ndef train(ctx):\n    pass\n")
    needs = usercode.program_modules(entrypoint="usesbig:train", paths=[str(proj), str(site)], launch_dir=str(proj))
    kinds = {n.module: n.kind for n in needs}
    assert kinds["usesbig"] == PROJECT and kinds["userhelper"] == PROJECT and kinds["bigpkg"] == PACKAGE
    assert "deep_dependency" not in kinds and "another_dependency" not in kinds and "bigpkg.inner" not in kinds


def _plan(tmp_path, overrides, *, embedded=False, job=None):
    cfg = load_config({"train": {"entrypoint": "usertrain:train"}}, overrides)
    return usercode.plan(cfg, embedded=embedded, launch_dir=str(tmp_path), job=job or {}, validate=lambda env: None)


def test_the_plan_once_connected(tmp_path):
    proj = _project(tmp_path)
    shipped = {"working_dir": "gcs://_ray_pkg_1.zip"}
    # Shipped: relative paths stay relative (each task's own copy), the tasks check the script and the modules.
    p = _plan(proj, ["train.entrypoint=null", "train.script=mwms_script.py", "train.python_path=[lib, /opt/x]"],
              job=shipped)
    assert (p.where, p.script, p.python_path) == (shipping.WORKING_DIR, "mwms_script.py", ["lib", "/opt/x"])
    assert p.needs.script == "mwms_script.py" and p.needs.program and p.needs.python_path == ("lib", "/opt/x")
    assert p.key == "train.script 'mwms_script.py'"
    # ray.ship_code=off on a cluster: the same path on every node.
    p = _plan(proj, ["ray.ship_code=off", "train.python_path=[lib]"])
    assert p.where == shipping.OFF and p.python_path == [str(proj / "lib")] and not p.needs.program
    assert Need("usertrain", PROJECT) in p.needs.modules
    # One machine: the launch directory on the tasks' path, a missing script refused at once.
    p = _plan(proj, [], embedded=True)
    assert p.where == shipping.EMBEDDED and p.python_path == [str(proj)]
    with pytest.raises(ConfigError, match=r"train.script \('nope.py'\): no such file"):
        _plan(proj, ["train.entrypoint=null", "train.script=nope.py"], embedded=True)
    # Joined before raytf without a working_dir: its local working_dir cannot be added now.
    assert _plan(proj, []).where == shipping.JOINED
    with pytest.raises(ConfigError, match="connected to Ray before raytf"):
        _plan(proj, ["ray.runtime_env.working_dir=."])
    # A ParameterServerStrategy server checks nothing: it runs none of the program.
    ps = ["cluster.strategy=parameter_server", "cluster.num_ps=1"]
    p = _plan(proj, ps, job=shipped)
    cfg = load_config({"train": {"entrypoint": "x:y"}}, ps)
    assert p.needs_of(cfg, "ps") is None and p.needs_of(cfg, "worker") is None and p.needs_of(cfg, "chief")


def test_the_plan_refuses_missing_code_in_one_line(tmp_path):
    p = _plan(_project(tmp_path), ["ray.ship_code=off"])
    infos = [TaskInfo(role="worker", index=0, rank=0, host="198.18.0.3", port=1, node_id="a", pid=1,
                      code_missing=(Missing(PROJECT, "usertrain"),)),
             TaskInfo(role="worker", index=1, rank=1, host="198.18.0.4", port=1, node_id="b", pid=2)]
    with pytest.raises(ConfigError) as e:
        p.refuse_missing(infos)
    assert str(e.value).startswith("the program is not on every host: 198.18.0.3 (worker 0) cannot import 'usertrain'")
    p.refuse_missing([infos[1]])  # all there: nothing said


def test_what_ray_init_is_given(tmp_path, monkeypatch):
    proj = _project(tmp_path)
    (proj / "myenv").mkdir()
    (proj / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    monkeypatch.delenv(usercode.JOB_CONFIG_ENV, raising=False)
    cfg = load_config({"train": {"script": "mwms_script.py"}}, ["storage.path=./out/runs"])
    env = usercode.init_env(cfg, embedded=False, launch_dir=str(proj))
    assert env.shipped == str(proj) and env.runtime_env["working_dir"] == str(proj)
    assert env.runtime_env["excludes"] == [".git", ".venv", "venv", "__pycache__", "/myenv/", "/out/runs/"]
    assert usercode.init_env(cfg, embedded=True, launch_dir=str(proj)).runtime_env == {}
    # Under `ray job submit --working-dir .`: the job has its working_dir; nothing is shipped twice.
    monkeypatch.setenv(usercode.JOB_CONFIG_ENV, json.dumps({"runtime_env": {"working_dir": "gcs://_ray_pkg_1.zip"}}))
    assert usercode.init_env(cfg, embedded=False, launch_dir=str(proj)).runtime_env == {}
    monkeypatch.delenv(usercode.JOB_CONFIG_ENV)
    # Refused before anything starts: a script not in what is shipped, a local working_dir that is not there.
    with pytest.raises(ConfigError, match=r"train.script \('nope.py'\): no such file in .*the directory shipped"):
        usercode.init_env(load_config({"train": {"script": "nope.py"}}), embedded=False, launch_dir=str(proj))
    with pytest.raises(ConfigError, match=r"ray.runtime_env.working_dir \('./gone'\): no such directory"):
        usercode.init_env(load_config({"train": {"entrypoint": "a:b"}}, ["ray.runtime_env.working_dir=./gone"]),
                          embedded=False, launch_dir=str(proj))
    size = usercode.init_error(ValueError("Package size (600.00MiB) exceeds the maximum size of 512.00MiB. ..."), env)
    assert isinstance(size, ConfigError) and str(size).startswith(f"ray.ship_code: the launch directory {proj} packs")
    assert usercode.init_error(ConnectionError("GCS unreachable"), env) is None


def test_ship_code_is_a_setting():
    assert load_config({"train": {"entrypoint": "a:b"}}).ray.ship_code is ShipCode.auto
    with pytest.raises(ConfigError, match="ship_code"):
        load_config({"train": {"entrypoint": "a:b"}}, ["ray.ship_code=sometimes"])


# -- the task: what it finds, where it will look -------------------------------------------------------------------

def test_a_task_finds_the_program_without_running_it(tmp_path, monkeypatch):
    proj = _project(tmp_path)
    monkeypatch.chdir(proj)  # a task's current directory is its copy of the working_dir
    needs = CodeNeeds(modules=(Need("usertrain", PROJECT), Need("mypkg.util", PROJECT), Need("json", PACKAGE),
                               Need("surely_not_installed_pkg", PACKAGE, "userhelper.py")),
                      python_path=(".",))
    assert task_usercode.missing(needs) == [Missing(PACKAGE, "surely_not_installed_pkg", "userhelper.py")]
    assert task_usercode.task_paths(["lib", "/opt/x"]) == [str(proj / "lib"), "/opt/x"]
    script = CodeNeeds(modules=(Need("userhelper", PROJECT),), script="mwms_script.py", program=True)
    assert task_usercode.missing(script) == []
    monkeypatch.chdir(tmp_path.parent)  # a host without the copy: the program is missing (what it imports, too)
    assert task_usercode.missing(script) == [Missing(SCRIPT, str(tmp_path.parent / "mwms_script.py"))]
    assert task_usercode.missing(CodeNeeds(modules=(Need("usertrain", PROJECT), Need("userhelper", PROJECT, "u.py"),
                                                    Need("surely_not_installed_pkg", PACKAGE, "u.py")))) == [
        Missing(PROJECT, "usertrain")]
    assert task_usercode.missing(CodeNeeds(modules=(Need("mypkg.util", PROJECT, "usertrain.py"),))) == [
        Missing(PROJECT, "mypkg.util", "usertrain.py")]


def test_env_vars_written_as_numbers_reach_ray_as_strings():
    """`ray.runtime_env.env_vars.N=9` gives OmegaConf's int: Ray refuses anything but strings, so the tasks'
    runtime_env (the one Ray checks before anything is reserved) carries text (found by the slow-upload test)."""
    from raytf._core import shipping

    env = {"env_vars": {"N": 9, "R": 0.5, "B": True, "S": "x"}, "pip": ["a"]}
    assert shipping.task_level(env) == {"env_vars": {"N": "9", "R": "0.5", "B": "true", "S": "x"}, "pip": ["a"]}
    assert env["env_vars"]["N"] == 9  # the user's config is not changed
