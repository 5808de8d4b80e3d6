"""raytf/_core/finder.py: a module found where it would be imported from, none of its code run (the driver's and
every task's code check, issue 32)."""

from raytf._core.finder import find_spec


def test_a_submodule_is_found_without_running_its_package(tmp_path):
    pkg = tmp_path / "prog_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('ran the package')\n")
    (pkg / "model.py").write_text("raise RuntimeError('ran the module')\n")
    spec = find_spec("prog_pkg.model", [str(tmp_path)])
    assert spec is not None and spec.origin == str(pkg / "model.py")
    assert find_spec("prog_pkg.absent", [str(tmp_path)]) is None
    assert find_spec("prog_pkg.model.deeper", [str(tmp_path)]) is None  # a module, not a package
    assert find_spec("prog_pkg", []) is None  # not on these paths nor on sys.path


def test_the_interpreters_own_finders_count(tmp_path):
    assert find_spec("json.decoder", [str(tmp_path)]) is not None  # the standard library, from sys.path
    assert find_spec("sys", []) is not None  # built in
