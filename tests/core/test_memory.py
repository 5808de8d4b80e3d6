"""failure.max_task_rss_gb: each task's limit (raytf/_core/memory.py), and how a task reads its memory and its
node's (raytf/_task/rss.py: /proc and cgroups, no TensorFlow)."""

import pytest

from raytf._core.memory import TaskMemory, rss_limits, worth_recycling
from raytf._task import rss
from raytf.config import load_config
from raytf.errors import ConfigError
from tests.conftest import ROOT


def test_the_limits_are_the_setting_or_a_share_of_each_nodes_memory():
    tasks = [TaskMemory(0, "a", None, 16.0), TaskMemory(1, "a", None, 16.0), TaskMemory(2, "b", None, 8.0),
             TaskMemory(3, "c", None, None)]
    assert rss_limits(6.0, tasks) == {0: 6.0, 1: 6.0, 2: 6.0, 3: 6.0}
    assert rss_limits(0, tasks) == {}  # 0: recycling off
    # Unset: 80% of the node's memory shared among the run's tasks on it; unknown memory: no limit.
    assert rss_limits(None, tasks) == {0: 6.4, 1: 6.4, 2: 6.4}
    # A role that reserves memory (cluster.<role>.memory_gb) is held to its reservation.
    assert rss_limits(None, [TaskMemory(0, "a", 2.0, 16.0), TaskMemory(1, "a", None, 16.0)]) == {0: 2.0, 1: 6.4}


def test_a_recycle_is_worth_it_only_for_memory_that_grew():
    assert worth_recycling(2.6, 1.0, 2.5)
    assert not worth_recycling(2.4, 1.0, 2.5)  # below the limit
    assert not worth_recycling(2.6, 2.2, 2.5)  # grew 0.4 GiB, less than a quarter of the limit


def test_the_task_reads_its_rss_and_its_nodes_memory_capped_by_its_cgroup(tmp_path):
    assert 0.005 < rss.rss_gib() < 8  # this very process
    assert set(rss.sample()) == {"rss_gib"}
    statm = tmp_path / "statm"
    statm.write_text(f"100000 {(3 << 30) // rss._PAGE} 0 0 0 0 0\n")
    assert rss.rss_gib(str(statm)) == pytest.approx(3.0)
    assert rss.rss_gib(str(tmp_path / "none")) is None
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemFree:        1000 kB\n")  # 24 GiB
    limit = tmp_path / "memory.max"
    limit.write_text("max\n")
    assert rss.node_gib(str(meminfo), (str(limit),)) == 24.0
    limit.write_text(str(6 << 30))  # a container's 6 GiB
    assert rss.node_gib(str(meminfo), (str(limit),)) == 6.0
    assert rss.node_gib(str(tmp_path / "none"), (str(limit),)) == 6.0
    assert rss.node_gib(str(tmp_path / "none"), (str(tmp_path / "none2"),)) is None


def test_the_setting_takes_gib_zero_or_null_and_refuses_a_negative():
    base = ROOT / "conf/local.yaml"
    assert load_config(base).failure.max_task_rss_gb is None
    assert load_config(base, ["failure.max_task_rss_gb=12.5"]).failure.max_task_rss_gb == 12.5
    with pytest.raises(ConfigError, match=r"failure.max_task_rss_gb .*0 \(never recycle\)"):
        load_config(base, ["failure.max_task_rss_gb=-1"])
