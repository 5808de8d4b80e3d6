"""Input preprocessed on a host of its own, on one host bed (a CPU host, two trainer hosts): Ray Data's
preprocessing (map_batches) pinned to the CPU host by a custom resource, the two MultiWorkerMirroredStrategy workers
on trainer hosts of their own, each reading its equal share from there; and the tf.data service's workers (and
dispatcher) pinned there the same way, every element preprocessed on the CPU host (the map function reads its own
network namespace's address, a TF op) and read once an epoch by the trainers."""

import json

import pytest

from tests import hosts
from tests.cluster import hostrun

# The bed's 3 Ray nodes take 12-20 s to start: one bed for both inputs (issue 50). CI's second step (-m slow).
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

ROWS = 256
SERVED_ROWS = 128


@pytest.fixture(scope="module")
def bed():
    # The head (driver, Ray Data's split coordinator, the service's servers) preprocesses; hosts 1-2 train. The
    # trainers keep a CPU free beside their worker: only the pin keeps the preprocessing (Ray Data spreads its
    # tasks; the service's workers go where there is room) off them.
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


def test_service_on_the_cpu_host_every_element_preprocessed_there_once_an_epoch(bed, tmp_path):
    out = tmp_path / "seen"
    out.mkdir()
    with hostrun.Launch(bed, tmp_path, "dsvc", "train.entrypoint=tests.dataservice_fns:record_served",
                        f"train.params.rows={SERVED_ROWS}", f"train.params.out_dir={out}", "train.params.mark=net",
                        "cluster.worker.custom.trainer=1", "train.epochs=2", "train.steps_per_epoch=null",
                        "train.batch_size=4", "data_service.workers=2", "data_service.cpus=0.5",
                        "data_service.resources.preprocess=1", "checkpoint.every_epochs=0",
                        "checkpoint.export_model=false") as run:
        code, result = run.finish()
    assert code == 0, run.output()
    assert result["status"] == "succeeded", result["error"]
    cpu_host, *trainers = bed.hosts
    assert sorted(t["host"] for t in result["tasks"]) == sorted(h.address for h in trainers)
    served = result["data_service"]["attempts"][0]
    assert {a.rpartition(":")[0] for a in [served["dispatcher"], *served["workers"]]} == {cpu_host.address}
    for epoch in (0, 1):
        seen = [json.loads((out / f"a1-e{epoch}-r{rank}.json").read_text()) for rank in (0, 1)]
        assert sorted(seen[0]["ids"] + seen[1]["ids"]) == list(range(SERVED_ROWS)), epoch  # every element once
        assert {w for s in seen for w in s["where"]} == {cpu_host.address}, epoch  # preprocessed there
    print(f"tf.data service on hosts: first step after {result['first_step_s']}s, run {result['duration_s']}s")
    # The servers' processes are gone with the run.
    assert bed.wait_gone(cpu_host, r"^ray::DataServiceServer", 30) == []
