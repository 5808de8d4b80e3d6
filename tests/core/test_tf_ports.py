"""The TF servers' ports (issue 19): the order a task tries cluster.port_range in, the error when none is free, the
plan carrying the range to every task, the failure policy's verdict, and the start-up warning naming what is
exposed. Pure."""

import pytest

from raytf._core import failure, tf_ports
from raytf._core.plan import make_plan
from raytf._core.topology import TaskAddress
from raytf.config import FailureConfig, Strategy, load_config

BASE = {"train": {"entrypoint": "examples.keras_cnn:train"}}


@pytest.mark.parametrize("start", [0, 1, 5, 9])
def test_candidates_try_every_port_of_the_range_once_from_the_offset(start):
    order = tf_ports.candidates(20000, 20009, start)
    assert order[0] == 20000 + start
    assert sorted(order) == list(range(20000, 20010))  # each once, nothing outside
    assert order == sorted(order[: 10 - start]) + sorted(order[10 - start:])  # up to the top, then from the bottom


def test_candidates_of_a_single_port():
    assert tf_ports.candidates(20000, 20000, 0) == [20000]


def test_none_free_names_the_key_the_host_the_count_and_the_fix():
    message = tf_ports.none_free([20000, 20001], "198.18.0.3")
    assert message.startswith("cluster.port_range [20000, 20001]: no free port on host 198.18.0.3 (tried all 2")
    assert "Fix: widen cluster.port_range, or place fewer tasks per host" in message
    assert "\n" not in message


def test_the_plan_gives_every_task_the_range():
    plan = make_plan(load_config(BASE, ["cluster.strategy=parameter_server", "cluster.num_ps=1",
                                        "cluster.port_range=[20000,20009]"]))
    assert [t.port_range for t in plan.tasks] == [(20000, 20009)] * 4
    assert {t.port_range for t in make_plan(load_config(BASE)).tasks} == {None}


def test_no_free_port_is_a_config_failure_never_retried():
    verdict = failure.decide(kind=failure.CONFIG, error_type="", attempt=1, progressed=False, failures_so_far=0,
                             cfg=FailureConfig(max_failures=-1))
    assert verdict.decision is failure.Decision.RAISE and "a retry would fail the same way" in verdict.reason
    assert failure.root_cause([failure.PEER, failure.STARTUP, failure.CONFIG]) == 2


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True),
                                                 ("[::1]", True), ("localhost", True), ("LOCALHOST", True),
                                                 ("198.18.0.2", False), ("10.0.0.1", False), ("fe80::1", False),
                                                 ("node-1.example", False)])
def test_is_loopback(host, loopback):
    assert tf_ports.is_loopback(host) is loopback


def _addresses(*pairs, evaluator=None):
    out = [TaskAddress("worker", i, host, port) for i, (host, port) in enumerate(pairs)]
    return out + ([TaskAddress("evaluator", 0, *evaluator)] if evaluator else [])


MWMS = Strategy.multi_worker_mirrored


def test_exposure_warning_lists_every_server_when_one_address_is_not_loopback():
    warning = tf_ports.exposure_warning(_addresses(("198.18.0.2", 20001), ("198.18.0.3", 20000)), strategy=MWMS,
                                     port_range=[20000, 20009])
    assert warning == ("TF's gRPC servers accept anyone who can reach them (no authentication, no TLS): "
                       "198.18.0.2:20001, 198.18.0.3:20000; let only the cluster's hosts reach these ports "
                       "(docs/security.md)")


def test_exposure_warning_without_a_range_suggests_one():
    warning = tf_ports.exposure_warning(_addresses(("127.0.0.1", 41000), ("fe80::1", 42000)), strategy=MWMS,
                                     port_range=None)
    assert "127.0.0.1:41000, [fe80::1]:42000;" in warning
    assert warning.endswith("(cluster.port_range puts them in one range a firewall rule can cover; "
                            "docs/security.md)")


@pytest.mark.parametrize("hosts", [("127.0.0.1", "127.0.0.1"), ("::1", "localhost")])
def test_no_exposure_warning_when_every_address_is_loopback(hosts):
    assert tf_ports.exposure_warning(_addresses(*((h, 20000 + i) for i, h in enumerate(hosts))), strategy=MWMS,
                                  port_range=None) is None


def test_no_exposure_warning_for_what_runs_no_cluster_server():
    # The evaluator is no server of the cluster; a single-task strategy runs none at all.
    assert tf_ports.exposure_warning(_addresses(("127.0.0.1", 20000), evaluator=("198.18.0.9", 20001)),
                                  strategy=MWMS, port_range=None) is None
    assert tf_ports.exposure_warning(_addresses(("198.18.0.2", 20000)), strategy=Strategy.mirrored,
                                  port_range=None) is None
