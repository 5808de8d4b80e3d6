"""A run directory on the driver's host only (hosts with a /tmp of their own, as separate machines have):
refused before any training, with the shared-storage message."""

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from tests import hosts
from tests.cluster.hostrun import Launch

# CI's second step (-m slow), as every host-bed test: each starts 3-5 Ray nodes (~40 s a test).
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


@pytest.fixture(scope="module")
def bed():
    yield from hosts.bed_for_tests([0, 1, 1], private_tmp=True)


@pytest.fixture
def head_only_dir():
    """A directory in /tmp: the head's own, which the other hosts' private /tmp hides."""
    path = Path(tempfile.mkdtemp(prefix="raytf-head-only-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_storage_on_the_drivers_host_only_is_refused_before_training(bed, head_only_dir):
    tmp_path = head_only_dir
    with Launch(bed, tmp_path, "local-only", "train.epochs=1", "train.steps_per_epoch=2") as run:
        code, result = run.finish(timeout_s=240)
    assert code == 1, run.output()
    errors = [line for line in run.lines if line.startswith("raytf: ")]
    assert len(errors) == 1 and "is not visible from worker 0" in errors[0] and "use shared storage" in errors[0]
    assert result["status"] == "failed" and result["attempts"][0]["first_step_at"] is None
    assert not (tmp_path / "local-only" / "checkpoints").exists()
    assert json.loads((tmp_path / "local-only" / "result.json").read_text())["error"]["message"]
