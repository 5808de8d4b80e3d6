"""The documentation's launch commands that another test trains as they are written: the command's config and its
overrides first, then the test's own (storage, sizes, what it checks). `tests/ray/test_docs_snippets_train.py`
counts each such command as run, by the test named in `TRAINED_BY`, rather than train it a second time: four of
docs/scripts.md's five launches, one of docs/parameter-server.md's, docs/performance.md's scaling report and README.md's
first command were trained twice in CI, ~3 minutes of its second step's 25 (a rehearsal's times, docs/testing.md).

A test that trains a documented command takes its config from `config(command, ...)` (or its command line from
`argv(command, ...)`), which fails if no slow block writes that command (a page's edit then reaches the test);
`tests/core/test_docs_snippets.py` checks that each test `TRAINED_BY` names exists and does so."""

from __future__ import annotations

import shlex

from tests.conftest import ROOT

# A documented launch command (shell-split and joined again: shlex.join) -> the test that trains it.
TRAINED_BY: dict[str, str] = {
    "python -m raytf.launch conf/local.yaml":  # (README.md's first command, and docs/getting-started.md's)
        "tests/ray/test_mwms_local.py::test_cli_runs_conf_local_end_to_end",
    "python -m raytf.launch conf/local.yaml --scaling 1,2,4 cluster.worker.cpus=0.5":  # (docs/performance.md's)
        "tests/ray/test_scaling.py::test_scaling_report_runs_each_count",
    "python -m raytf.launch conf/tutorial_keras.yaml":
        "tests/ray/test_tutorials.py::test_the_keras_tutorial_runs_unmodified_and_a_relaunch_resumes_on_every_worker",
    "python -m raytf.launch conf/keras3.yaml":
        "tests/ray/test_keras3.py::test_a_keras_3_script_killed_after_a_commit_resumes_from_its_backup_on_every_worker",
    "python -m raytf.launch conf/tutorial_ctl.yaml":
        "tests/ray/test_tutorials.py::test_the_custom_loop_tutorial_commits_its_checkpoint_manager_saves",
    "python -m raytf.launch conf/orbit_style.yaml":
        "tests/ray/test_tutorials.py::"
        "test_an_orbit_style_loop_is_committed_by_its_global_step_and_its_summaries_are_its_metrics",
    "python -m raytf.launch conf/ps_local.yaml train.entrypoint= train.script=examples/ps_script.py "
    "'train.args=[--working-dir,\"{checkpoint_dir}\"]'":
        "tests/ray/test_script_mode.py::test_parameter_server_script",
    "python -m raytf.launch conf/ps_local.yaml train.entrypoint=examples.ps_custom_loop:train":
        "tests/ray/test_ps_local.py::test_custom_loop_with_partitioned_variables",
}


def launches() -> dict[str, list[str]]:
    """Every launch command of the documentation's slow blocks: its joined form -> its argv."""
    from tests.core.test_docs_snippets import commands, slow_snippets

    return {shlex.join(argv): argv for _, _, language, code in slow_snippets() if language == "bash"
            for argv in commands(code) if argv[:3] == ["python", "-m", "raytf.launch"]}


def argv(command: str, *overrides: str) -> list[str]:
    """The documented launch `command` as a test runs it from the repository's root (this interpreter), the test's
    `overrides` after the command's own. Raises KeyError as `config` does."""
    import sys

    return [sys.executable, *launches()[command][1:], *overrides]


def config(command: str, *overrides: str):
    """The config the documented launch `command` trains, the test's `overrides` given after the command's own.
    Raises KeyError if no slow block of the documentation writes `command` (joined as `TRAINED_BY` writes it)."""
    import raytf

    argv = launches()[command]
    return raytf.load_config(ROOT / argv[3], [*argv[4:], *overrides])
