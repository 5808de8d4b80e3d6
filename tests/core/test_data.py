"""Ray Data input, the pure rules (raytf/_core/data.py) and the config key's."""

import pytest

from raytf._core import data
from raytf.config import load_config
from raytf.errors import ConfigError


def test_who_reads_what():
    assert data.reads("worker", 2) == data.SHARE
    assert data.reads("worker", 1) == data.WHOLE  # a single-task strategy, or one MWMS worker
    assert data.reads("evaluator", 2) == data.WHOLE
    assert data.reads("ps", 2) is None
    assert data.reads("chief", 2) is None


@pytest.mark.parametrize("rows, workers, fine", [(96, 2, True), (96, 3, True), (97, 2, False), (1, 2, False),
                                                 (None, 2, True), (5, 1, True), (0, 1, False), (0, 2, False)])
def test_split_problem(rows, workers, fine):
    problem = data.split_problem("train", rows, workers)
    assert (problem is None) is fine
    if problem is not None:
        assert "'train'" in problem and "Fix:" in problem and "\n" not in problem


def test_split_problem_names_the_rows_dropped_and_the_fix():
    problem = data.split_problem("train", 1001, 2)
    assert "1001 rows" in problem and "drop 1 row(s) every epoch" in problem and "ds.limit(1000)" in problem


@pytest.mark.parametrize("rows, workers, droppable", [(32, 3, True), (97, 2, True), (1, 2, False), (0, 2, False),
                                                      (None, 2, False)])
def test_an_unequal_split_goes_on_only_when_every_worker_keeps_a_row(rows, workers, droppable):
    # (raytf.compat follows Ray Train, which drops the rows left over; no row for a worker is never run.)
    assert data.droppable(rows, workers) is droppable


def test_names_are_checked():
    assert data.check_names(["train", "val"], "datasets=") == ["train", "val"]
    for bad in ("", "a b", 3, None):
        with pytest.raises(ConfigError, match="datasets=: dataset name"):
            data.check_names([bad], "datasets=")


def test_missing_names_what_was_given():
    line = data.missing("valid", ["val", "train"])
    assert "ctx.dataset('valid')" in line and "'train', 'val'" in line and "Fix:" in line
    assert "given: none" in data.missing("train", [])


def test_global_batch_is_per_replica_times_replicas():
    assert data.global_batch(8, 2) == 16
    with pytest.raises(ValueError):
        data.global_batch(0, 2)


def test_config_key_format_and_parameter_server_refusal():
    cfg = load_config("conf/local.yaml", ["train.datasets=examples.ray_data:datasets"])
    assert cfg.train.datasets == "examples.ray_data:datasets"
    with pytest.raises(ConfigError, match=r"train.datasets \('examples/ray_data.py'\) must look like"):
        load_config("conf/local.yaml", ["train.datasets=examples/ray_data.py"])
    with pytest.raises(ConfigError, match="not parameter_server") as e:
        load_config("conf/ps_local.yaml", ["train.datasets=examples.ray_data:datasets"])
    assert "\n" not in str(e.value)
