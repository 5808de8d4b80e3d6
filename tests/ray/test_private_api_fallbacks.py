"""The driver's optional features without the private Ray symbols they use (raytf/_core/private_apis.py): each
symbol taken away as a Ray that moved it would, the feature turns off with one warning naming it and the driver goes
on the public way (or without the feature). Ray is imported, not started."""

import inspect
import logging

import pytest

from raytf._core import private_apis as apis

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture(autouse=True)
def fresh_switches():
    apis.SWITCHES.reset()
    yield
    apis.SWITCHES.reset()


def _said(caplog, api) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and api.dotted in r.getMessage()]
    assert len(lines) == 1 and api.feature.name in lines[0], lines
    return lines


def test_row_counts(monkeypatch, caplog):
    import ray.data

    from raytf._driver.data import Datasets

    monkeypatch.delattr(ray.data.Dataset, "_meta_count")
    assert Datasets.known_rows(object()) is None and Datasets.known_rows(object()) is None
    _said(caplog, apis.META_COUNT)


def test_a_datasets_own_copy(monkeypatch, caplog):
    import ray.data

    from raytf._driver import data

    def copy(ds, _as=None):  # a Ray without _deep_copy
        return ds

    monkeypatch.setattr(ray.data.Dataset, "copy", staticmethod(copy))
    mine = object()
    assert data._own_copy(mine) is mine  # the dataset itself: its options are set on it
    _said(caplog, apis.DATASET_COPY)


def test_excluded_resources_the_public_way(monkeypatch, caplog):
    import warnings

    from ray.data import ExecutionOptions, ExecutionResources

    from raytf._driver import data

    # A Ray whose public setter does without the private one (2.60's calls it).
    monkeypatch.delattr(ExecutionOptions, "_set_exclude_resources")
    monkeypatch.setattr(ExecutionOptions, "exclude_resources", property(
        lambda self: self.__dict__.get("_held"), lambda self, value: self.__dict__.__setitem__("_held", value)))
    options, held = ExecutionOptions(), ExecutionResources(cpu=2, gpu=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (Ray's deprecation warning of the public setter)
        data._exclude(options, held)
    assert options.exclude_resources == held
    _said(caplog, apis.EXCLUDE_RESOURCES)


def test_split_coordinators(monkeypatch, caplog):
    from ray.data._internal.iterator.stream_split_iterator import StreamSplitDataIterator

    from raytf._driver import data

    def __init__(self, coord_actor, output_split_idx, world_size):  # keeps it under another name
        self._coordinator = coord_actor

    monkeypatch.setattr(StreamSplitDataIterator, "__init__", __init__)
    share = type("Share", (), {"_coord_actor": "actor"})()
    assert data._coordinator(share) is None
    _said(caplog, apis.COORD_ACTOR)


def test_metrics_export_interval(monkeypatch, caplog):
    import ray

    from raytf._driver import raymetrics

    monkeypatch.delattr(ray, "_config")
    assert raymetrics._export_interval_s() == 10.0
    _said(caplog, apis.REPORT_INTERVAL)


def test_standby_slots(monkeypatch, caplog):
    import sys

    import ray

    from raytf._driver import placement

    pg_module = sys.modules["ray.util.placement_group"]  # (ray.util.placement_group is also the function's name)

    def placement_group_table(placement_group=None):  # a table without "bundles_to_node_id"
        return {"bundles": {}}

    monkeypatch.setattr(ray.util, "placement_group_table", placement_group_table)
    monkeypatch.setattr(pg_module, "placement_group_table", placement_group_table)
    assert placement.bundle_nodes(None) is None and placement.bundle_nodes(None) is None
    _said(caplog, apis.PG_TABLE)


def test_avoiding_nodes(monkeypatch, caplog):
    import sys

    from raytf._driver import placement

    pg_module = sys.modules["ray.util.placement_group"]
    assert "bundle_label_selector" in placement.avoiding({"n1"}, 2)
    apis.SWITCHES.reset()

    def placement_group(bundles, strategy="PACK", name="", lifetime=None):  # a Ray before label selectors
        raise AssertionError("not called")

    monkeypatch.setattr(pg_module, "placement_group", placement_group)
    assert placement.avoiding({"n1"}, 2) == {} and placement.avoiding(set(), 2) == {}
    _said(caplog, apis.LABEL_SELECTOR)


def test_drain_notices(monkeypatch, caplog):
    import ray._private.state

    from raytf._driver import nodes

    monkeypatch.delattr(ray._private.state.GlobalState, "get_draining_nodes")  # a Ray that moved it
    assert nodes.draining() == {} and nodes.draining() == {}
    _said(caplog, apis.DRAINING_NODES)
    # There, but Ray cannot answer now (here: not connected; on a cluster: its GCS busy): none this round, asked
    # again at the next, quietly.
    monkeypatch.undo()
    apis.SWITCHES.reset()
    caplog.clear()
    assert nodes.draining() == {} and not apis.SWITCHES.is_off(apis.DRAIN_NOTICES)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_infeasible_requests(monkeypatch, caplog):
    import ray._raylet

    from raytf._driver import nodes

    monkeypatch.setattr(ray._raylet, "InnerGcsClient", type("InnerGcsClient", (), {}))  # a Ray that moved it
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    assert nodes.infeasible("00ff") is None and nodes.infeasible("00ff") is None  # (then waited for, as before)
    _said(caplog, apis.INFEASIBLE)


def test_autoscaler_events(monkeypatch, caplog):
    import ray._private.ray_constants
    import ray._raylet

    from raytf._core.plan import AUTOSCALER_EVENT
    from raytf._driver import nodes

    assert AUTOSCALER_EVENT == ray._private.ray_constants.LOG_PREFIX_EVENT_SUMMARY  # (how its events are marked)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.delattr(ray._raylet, "GcsLogSubscriber")  # a Ray that moved it
    for _ in range(2):
        events = nodes.AutoscalerEvents().open()
        assert events.heard() == []  # (nothing heard: the request is waited for, as before)
        events.close()
    _said(caplog, apis.LOG_SUBSCRIBER)


def test_knowing_whether_a_dataset_runs_tasks(monkeypatch, caplog):
    import ray.data

    from raytf._driver import data

    monkeypatch.delattr(ray.data.Dataset, "__init__")  # (no _logical_plan in its code: a Ray that changed it)
    assert data.runs_tasks(object()) and data.runs_tasks(object())  # (said while it waits, as any dataset)
    _said(caplog, apis.LOGICAL_PLAN)


def test_knowing_an_embedded_ray(monkeypatch, caplog):
    import ray._private.worker

    from raytf._driver import connect

    monkeypatch.delattr(ray._private.worker, "_global_node")
    assert connect.started_here() is False  # a cluster is assumed
    _said(caplog, apis.GLOBAL_NODE)


def test_token_auth_check(monkeypatch, caplog):
    import ray._raylet

    from raytf._driver import connect

    monkeypatch.delattr(ray._raylet, "get_authentication_mode")
    assert connect.token_auth() is None  # unknown: no warning about the cluster either
    _said(caplog, apis.AUTH_MODE)


def test_asking_the_embedded_ray_for_token_auth(monkeypatch, caplog):
    import ray
    import ray._raylet

    from raytf._driver import connect
    from raytf.config import load_config

    monkeypatch.setattr(ray._raylet, "Config", type("Config", (), {}))  # no initialize
    monkeypatch.setattr(connect.os, "environ", {k: v for k, v in connect.os.environ.items()
                                                if k not in (connect.AUTH_MODE_ENV, "RAY_ADDRESS")})
    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append(connect.os.environ.get(connect.AUTH_MODE_ENV)))
    assert connect.ensure_ray(load_config("conf/local.yaml")) is True
    assert seen == [None]  # left to Ray (token auth by default since 2.59)
    _said(caplog, apis.RAYLET_CONFIG)
    assert not [r for r in caplog.records if "accepts work from anyone" in r.getMessage()]


def test_every_driver_feature_has_its_test():
    driver = {a for a in apis.APIS if a.where.startswith("raytf/_driver/")}
    tested = {apis.META_COUNT, apis.DATASET_COPY, apis.EXCLUDE_RESOURCES, apis.COORD_ACTOR, apis.REPORT_INTERVAL,
              apis.PG_TABLE, apis.LABEL_SELECTOR, apis.GLOBAL_NODE, apis.AUTH_MODE, apis.RAYLET_CONFIG,
              apis.DRAINING_NODES, apis.INFEASIBLE, apis.SIGTERM_HANDLER, apis.LOG_SUBSCRIBER, apis.LOGICAL_PLAN}
    assert {a.feature for a in driver} == {a.feature for a in tested}
    assert inspect.getsource(test_every_driver_feature_has_its_test)  # (this list is the module's tests)


def test_the_clis_sigterm_handler_kept_while_ray_starts(monkeypatch, caplog):
    """While Ray starts or connects (_driver/signals.py's Holding), ray.init's own SIGTERM handler is kept out:
    raytf's stays and holds a SIGTERM until Ray is up. Without the private setter, Ray's handler's sys.exit(15)
    inside ray.init is taken for the same stop (KeyboardInterrupt, `cut_short`: the launch takes its half-started
    Ray down)."""
    import signal

    import ray._private.utils

    from raytf._driver import signals

    before = signal.getsignal(signal.SIGTERM)
    try:
        with signals.Holding():
            ray._private.utils.set_sigterm_handler(lambda signum, frame: None)  # (what ray.init does first)
            assert signal.getsignal(signal.SIGTERM) is signals._on_signal
        assert ray._private.utils.set_sigterm_handler.__name__ == "set_sigterm_handler"  # (put back)

        monkeypatch.delattr(ray._private.utils, "set_sigterm_handler")
        apis.SWITCHES.reset()  # (as a Ray without it: checked afresh)
        held = signals.Holding()
        with pytest.raises(KeyboardInterrupt), held:
            raise SystemExit(signal.SIGTERM)  # (Ray's handler, inside ray.init)
        assert held.cut_short and signals.exit_code() == 143
        _said(caplog, apis.SIGTERM_HANDLER)
    finally:
        signals._stopped_by = None
        signal.signal(signal.SIGTERM, before)
