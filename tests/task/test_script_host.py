"""Script mode's host in this process, with a real child process (which imports TensorFlow) and a storage
that fails."""

import io
import os

import pytest

import raytf
from raytf._core.plan import TaskSpec
from raytf._task.script.host import ScriptHost, child_env
from tests.conftest import ROOT
from tests.processes import leftover_script_processes as _leftovers


def _cfg(*overrides):
    return raytf.load_config(ROOT / "conf/script.yaml", list(overrides))


class _FailingStorage:
    """A RunDir whose checkpoint uploads fail (as after storage.upload_retries against a dead endpoint)."""

    uri = "/nowhere/run"

    def __init__(self):
        self.tries = 0

    def uri_of(self, *parts):
        return "/".join([self.uri, *parts])

    def next_checkpoint_seq(self):
        return 1

    def upload_checkpoint(self, local, epoch, step, meta, before_commit=None, seq=0):
        self.tries += 1
        raise OSError(f"upload of step {step} failed: connection refused")


@pytest.mark.timeout(120)
def test_failed_checkpoint_upload_stops_the_script(tmp_path):
    """The upload fails: the host stops the script (which would otherwise wait forever) and run() raises
    the storage error; no later checkpoint is uploaded after it."""
    cfg = _cfg("run.name=upload-fails", "train.script=tests/scripts/sync_forever.py", "train.args=[]")
    spec = TaskSpec(role="worker", index=0, rank=0, cpus=1, gpus=0)
    storage = _FailingStorage()
    events = []
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    host = ScriptHost(cfg=cfg, spec=spec, run_dir=storage, emit=lambda k, p: events.append((k, p)), attempt=1,
                      is_chief=True, scratch=str(scratch), log_file=io.BytesIO(), stream=True)
    host.restore(None)
    env = child_env(base={**os.environ, "TF_USE_LEGACY_KERAS": "1"}, tf_config=None, spec=spec, cfg=cfg,
                    run_uri=storage.uri, attempt=1, is_chief=True, num_workers=1,
                    checkpoint_dir=host.checkpoint_dir, resume_from=None, python_path=[str(ROOT)])
    with pytest.raises(OSError, match="upload of step 1 failed"):
        host.run(env)
    assert storage.tries == 1  # stopped at the first failure, the second sync not uploaded
    assert host.proc.returncode < 0  # killed, not exited
    assert _leftovers() == []
