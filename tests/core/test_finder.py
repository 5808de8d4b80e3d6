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


def _program(directory, name="py-spy"):
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / name
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return str(exe)


def test_a_program_beside_the_interpreter_comes_before_path(tmp_path):
    """A virtual environment's Python called by its path, not activated: its scripts are on no PATH (issue 50)."""
    from raytf._core.finder import find_program

    venv_spy = _program(tmp_path / "venv" / "bin")
    interpreter = str(tmp_path / "venv" / "bin" / "python")  # (need not exist: only its directory is read)
    assert find_program("py-spy", interpreter=interpreter, path="") == venv_spy
    on_path = _program(tmp_path / "elsewhere")
    assert find_program("py-spy", interpreter=interpreter, path=str(tmp_path / "elsewhere")) == venv_spy
    # Not beside it: PATH's, then none.
    other = str(tmp_path / "bare" / "python")
    assert find_program("py-spy", interpreter=other, path=str(tmp_path / "elsewhere")) == on_path
    assert find_program("py-spy", interpreter=other, path="") is None
    (tmp_path / "venv" / "bin" / "py-spy").chmod(0o644)  # not executable: not a program
    assert find_program("py-spy", interpreter=interpreter, path="") is None
