"""The program's way to the tasks on a real Ray (raytf issue 32; the rules are tested in tests/core/test_shipping.py,
the hosts that share no files in tests/cluster/test_hosts_code.py): a runtime_env Ray cannot set up ends the run in
one line, exit 2, with no attempt left running; a process connected before raytf cannot add a local working_dir;
a user's own local working_dir goes to the Ray job, where Ray takes it."""

import json
import subprocess
import sys

import pytest

import raytf
from raytf.errors import ConfigError
from tests.conftest import ROOT, state_address

pytestmark = [pytest.mark.timeout(300)]


def test_a_process_connected_before_raytf_cannot_add_a_local_working_dir(fast_cfg, no_leaks):
    """raytf.fit in a notebook that called ray.init itself: Ray takes a local working_dir only at ray.init, so the
    run is refused before anything is reserved, saying where to give it (no actor, no placement group: ~0 s)."""
    with pytest.raises(ConfigError) as info:
        raytf.fit(fast_cfg("run.name=localwd", "ray.runtime_env.working_dir=."), quiet=True)
    line = str(info.value)
    assert "\n" not in line and "connected to Ray before raytf" in line and "ray.init(address=..." in line


def _cli(tmp_path, *overrides: str) -> subprocess.CompletedProcess:
    """`python -m raytf.launch conf/local.yaml` joining the session's Ray, as a CLI run joins a cluster."""
    return subprocess.run(
        [sys.executable, "-m", "raytf.launch", "conf/local.yaml", "--quiet", f"storage.path={tmp_path}",
         "train.epochs=1", "train.steps_per_epoch=2", "train.batch_size=16", "cluster.standby=0",
         "checkpoint.export_model=false", "train.params.validation_steps=0", f"ray.address={state_address()}",
         *overrides],
        cwd=ROOT, capture_output=True, text=True, timeout=240)


@pytest.mark.slow  # a CLI run of its own (~10 s; no TensorFlow: its tasks never start)
def test_a_runtime_env_ray_cannot_set_up_ends_the_run_in_one_line(tmp_path, no_leaks):
    proc = _cli(tmp_path, "run.name=badenv", "ray.runtime_env.working_dir=https://127.0.0.1:9/code.zip")
    assert proc.returncode == 2, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if line.startswith("raytf: ")]
    assert len(said) == 1 and said[0].startswith("raytf: config error: ray.runtime_env could not be set up on "), \
        proc.stderr[-3000:]
    assert "Connection refused" in said[0] and "Traceback" not in proc.stderr + proc.stdout
    result = json.loads((tmp_path / "badenv" / "result.json").read_text())
    assert result["status"] == "failed" and [a["status"] for a in result["attempts"]] == ["failed"]


@pytest.mark.slow  # a CLI run of its own (~20 s; no model)
def test_a_users_own_local_working_dir_goes_to_the_job(tmp_path, no_leaks):
    """The issue's `ray.runtime_env.working_dir=.`, which Ray refused in the actors' options with a traceback: it is
    the job's now (ray.init), and the tasks run in its copy."""
    proc = _cli(tmp_path, "run.name=userwd", "ray.runtime_env.working_dir=.",
                "train.entrypoint=tests.train_fns:where_from")
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (tmp_path / "userwd" / "logs" / "worker0-attempt1.log").read_text()
    assert "/runtime_resources/working_dir_files/_ray_pkg_" in log and "/tests/train_fns.py" in log, log[-2000:]
    assert json.loads((tmp_path / "userwd" / "result.json").read_text())["status"] == "succeeded"
