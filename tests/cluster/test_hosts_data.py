"""Ray Data input on the host bed: the preprocessing (map_batches) pinned to a CPU-only host by a custom resource,
the two MultiWorkerMirroredStrategy workers on trainer hosts of their own, each reading its equal share from there."""

import json

import pytest

from tests import hosts
from tests.cluster import hostrun

# 32-43 s (the bed's 3 Ray nodes 12-20 s of it); 55-76 s on 2 cores shared with other test runs.
# CI's second step (-m slow), as every host-bed test: each starts 3-5 Ray nodes (~40 s a test).
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

ROWS = 256


@pytest.fixture(scope="module")
def bed():
    # The head (driver, Ray Data's split coordinator) preprocesses; hosts 1-2 train. The trainers keep a CPU free
    # beside their worker: only the pin keeps the preprocessing (Ray Data spreads its tasks) off them.
    yield from hosts.bed_for_tests([2, 2, 2], resources=[{"preprocess": 4}, {"trainer": 1}, {"trainer": 1}])


def test_preprocessing_on_its_host_every_row_once_an_epoch_on_the_trainers(bed, tmp_path):
    out = tmp_path / "seen"
    out.mkdir()
    with hostrun.Launch(bed, tmp_path, "data", "train.entrypoint=tests.data_fns:record_rows",
                        "train.datasets=tests.data_fns:pinned", f"train.params.rows={ROWS}",
                        f"train.params.out_dir={out}", "cluster.worker.custom.trainer=1", "train.epochs=2",
                        "train.steps_per_epoch=null") as run:
        code, result = run.finish()
    assert code == 0, run.output()
    assert result["status"] == "succeeded", result["error"]
    preprocess, *trainers = bed.hosts
    assert sorted(t["host"] for t in result["tasks"]) == sorted(h.address for h in trainers)
    for epoch in (0, 1):
        seen = [json.loads((out / f"a1-e{epoch}-r{rank}.json").read_text()) for rank in (0, 1)]
        print(f"epoch {epoch}: first batch after {max(s['first_batch_s'] for s in seen):.1f}s")
        assert len(seen[0]["ids"]) == len(seen[1]["ids"]) == ROWS // 2  # equal shares
        assert sorted(seen[0]["ids"] + seen[1]["ids"]) == list(range(ROWS)), epoch  # every row once
        assert {h for s in seen for h in s["hosts"]} == {preprocess.address}, epoch
    print(f"Ray Data on hosts: first step after {result['first_step_s']}s, run {result['duration_s']}s")
