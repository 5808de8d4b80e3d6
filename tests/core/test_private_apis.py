"""The private APIs raytf touches (raytf/_core/private_apis.py): one table, docs/architecture.md's copy of it, the
checks (missing, changed), an optional feature turned off with one warning, a required one refused at start as a
configuration failure. Pure: every symbol's absence is simulated (tests/task/test_private_apis.py checks the real
ones against the installed versions; tests/ray/test_private_api_fallbacks.py each driver fallback)."""

import sys
import types

import pytest

from raytf._core import failure
from raytf._core import private_apis as apis
from raytf.config import FailureConfig
from tests.conftest import ROOT

REGENERATE = "python -m tools.private_api_table --write"


@pytest.fixture(autouse=True)
def fresh_switches():
    apis.SWITCHES.reset()
    yield
    apis.SWITCHES.reset()


def test_the_table_is_whole():
    assert len({a.symbol for a in apis.APIS}) == len(apis.APIS)
    assert {a.feature for a in apis.APIS} == set(apis.FEATURES)  # every feature has its symbols, none is orphaned
    assert {f for f in apis.FEATURES if f.required} == {apis.KERAS_RESUME, apis.OWN_WRITES, apis.RAY_TRAIN_LOOPS,
                                                         apis.KERAS3_MWMS, apis.KERAS3_RESUME, apis.KERAS3_OWN_WRITES}
    for a in apis.APIS:
        module, _, path = a.symbol.partition(":")
        assert module and path and a.use and a.where.startswith("raytf/"), a
        assert (ROOT / a.where).is_file(), a.where
        assert a.package in {"tensorflow", "tf_keras", "keras", "ray", "os"}, a


def test_architecture_md_holds_the_generated_table():
    from tools import private_api_table as doc

    block = doc.doc_block((ROOT / "docs" / "architecture.md").read_text())
    assert block is not None, f"docs/architecture.md lost its {doc.BEGIN!r} ... {doc.END!r} markers"
    assert block == doc.block(), f"docs/architecture.md's private-API table is not the module's: run `{REGENERATE}`"


FAKE_SOURCE = """
class Thing:
    def method(self, input_tensor, extra=None):
        return self.hook

    def reads(self, cb):
        return getattr(cb, "_flag", False)


def helper(dirpath, strategy):
    return dirpath


def caller(path, strategy):
    return helper(path, strategy)
"""


@pytest.fixture
def fake(monkeypatch):
    """A module `raytf_fake_lib` with a class, a function calling a global, and a function reading a name as a
    string."""
    mod = types.ModuleType("raytf_fake_lib")
    exec(FAKE_SOURCE, mod.__dict__)
    monkeypatch.setitem(sys.modules, "raytf_fake_lib", mod)
    return mod


def _api(symbol, **kw):
    return apis.PrivateApi(symbol, apis.BREAKDOWN, "a test", "raytf/_core/private_apis.py", **kw)


def test_a_symbol_is_found_or_said_to_be_missing_or_changed(fake):
    assert apis.problem(_api("raytf_fake_lib:Thing.method", params=("self", "input_tensor"), uses=("hook",))) is None
    assert apis.problem(_api("raytf_fake_lib:helper", params=("dirpath", "strategy"))) is None
    assert apis.problem(_api("raytf_fake_lib:caller", uses=("helper",))) is None  # a global it looks up
    assert apis.problem(_api("raytf_fake_lib:Thing.reads", uses=("_flag",))) is None  # a name spelt as a string
    assert apis.problem(_api("raytf_fake_lib:Thing.method", keywords=("extra",))) is None
    assert apis.problem(_api("raytf_fake_lib:Thing.gone")).startswith("is missing (AttributeError")
    assert apis.problem(_api("raytf_fake_lib_gone:x")).startswith("is missing (ModuleNotFoundError")
    assert "not (self, tensor, ...)" in apis.problem(_api("raytf_fake_lib:Thing.method", params=("self", "tensor")))
    assert apis.problem(_api("raytf_fake_lib:Thing.method", keywords=("selector",))) == "changed: no parameter selector"
    assert apis.problem(_api("raytf_fake_lib:caller", uses=("write_dirpath",))) == (
        "changed: its code no longer uses write_dirpath")
    cls, name = apis.owner(_api("raytf_fake_lib:Thing.method"))
    assert (cls, name) == (fake.Thing, "method")
    assert apis.owner(_api("raytf_fake_lib:helper")) == (fake, "helper")


def _only_missing(monkeypatch, target):
    monkeypatch.setattr(apis, "problem", lambda api, *a: "is missing (simulated)" if api == target else None)


@pytest.mark.parametrize("api", [a for a in apis.APIS if not a.feature.required], ids=lambda a: a.dotted)
def test_an_optional_features_symbol_missing_turns_it_off_with_one_warning(api, monkeypatch):
    _only_missing(monkeypatch, api)
    warnings = []
    assert apis.available(api.feature, warnings.append) is False
    assert apis.available(api.feature, warnings.append) is False  # asked again: still off, not said again
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert api.dotted in warnings[0] and api.feature.name in warnings[0] and "is off" in warnings[0]
    assert apis.SWITCHES.is_off(api.feature)
    others = [f for f in apis.FEATURES if f != api.feature and not f.required]
    assert all(apis.available(f, warnings.append) for f in others) and len(warnings) == 1


@pytest.mark.parametrize("api", [a for a in apis.APIS if a.feature.required], ids=lambda a: a.dotted)
def test_a_required_features_symbol_missing_refuses_the_run_in_one_line(api, monkeypatch):
    _only_missing(monkeypatch, api)
    with pytest.raises(apis.PrivateApiMissing) as e:
        apis.require(api.feature)
    line = str(e.value)
    assert "\n" not in line and api.dotted in line and "is missing" in line and "Fix:" in line
    # The installed versions of what the symbol comes from (TensorFlow with tf-keras: the two move together).
    for package in {api.package} | ({"tensorflow"} if api.package == "tf_keras" else set()):
        assert f"{package} {apis.version(package)}" in line
    # Reported by the task as a configuration failure: never retried, whatever the budget.
    assert e.value.failure_kind == failure.CONFIG
    verdict = failure.decide(kind=failure.CONFIG, error_type="PrivateApiMissing", attempt=2, progressed=True,
                             failures_so_far=0, cfg=FailureConfig(max_failures=-1))
    assert verdict.decision is failure.Decision.RAISE
    # A script's child reports it by name (script/child.py): the same.
    assert failure.exit_failure(1, ["raytf: " + line], "PrivateApiMissing") == (failure.CONFIG, "PrivateApiMissing")


def test_a_call_that_fails_later_turns_the_feature_off_once():
    warnings = []
    apis.SWITCHES.turn_off(apis.ALL_REDUCE, "changed: a traced call failed (TypeError: x)", warnings.append)
    apis.SWITCHES.turn_off(apis.OWNED_NEXT, "changed: a traced call failed (TypeError: y)", warnings.append)
    assert apis.SWITCHES.is_off(apis.BREAKDOWN) and len(warnings) == 1 and apis.ALL_REDUCE.dotted in warnings[0]


def test_a_scripts_tf_config_guard_without_os_environ_class_leaves_environ_alone(monkeypatch, caplog):
    from raytf._task.script import child

    _only_missing(monkeypatch, apis.ENVIRON)
    monkeypatch.setitem(child.os.environ, "TF_CONFIG", "{}")
    before = type(child.os.environ)
    child._guard_tf_config()
    assert type(child.os.environ) is before
    lines = [r.getMessage() for r in caplog.records if "os._Environ" in r.getMessage()]
    assert len(lines) == 1 and "TF_CONFIG" in lines[0]
