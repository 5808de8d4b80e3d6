"""The tf.data service on the host bed: its workers (and dispatcher) pinned to a CPU-only host by a custom resource,
the two MultiWorkerMirroredStrategy trainers on hosts of their own; every element is preprocessed on the CPU host
(the map function reads its own network namespace's address, a TF op) and read once an epoch by the trainers."""

import json

import pytest

from tests import hosts
from tests.cluster import hostrun

# A bed of 3 Ray nodes, as test_hosts_data.py: CI's second step (-m slow).
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

ROWS = 128


@pytest.fixture(scope="module")
def bed():
    # The head preprocesses (the driver runs there too); hosts 1-2 train, each keeping a CPU free beside its worker:
    # only the pin keeps the service's workers off them.
    yield from hosts.bed_for_tests([2, 2, 2], resources=[{"preprocess": 4}, {"trainer": 1}, {"trainer": 1}])


def test_service_on_the_cpu_host_every_element_preprocessed_there_once_an_epoch(bed, tmp_path):
    out = tmp_path / "seen"
    out.mkdir()
    with hostrun.Launch(bed, tmp_path, "dsvc", "train.entrypoint=tests.dataservice_fns:record_served",
                        f"train.params.rows={ROWS}", f"train.params.out_dir={out}", "train.params.mark=net",
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
        assert sorted(seen[0]["ids"] + seen[1]["ids"]) == list(range(ROWS)), epoch  # every element once
        assert {w for s in seen for w in s["where"]} == {cpu_host.address}, epoch  # preprocessed there
    print(f"tf.data service on hosts: first step after {result['first_step_s']}s, run {result['duration_s']}s")
    # The servers' processes are gone with the run.
    assert bed.wait_gone(cpu_host, r"^ray::DataServiceServer", 30) == []
