"""Every private (undocumented, or internal) API of TensorFlow, tf-keras and Ray that raytf touches, in one table:
the symbol, what raytf uses it for, the feature it serves and what happens without it (raytf issue 33).

A private symbol can move or change in any release. So each is looked up through this module (`lookup`), never
imported directly, and a lookup that fails says so in one line:
  - an optional feature (the step-time breakdown, a standby's slots, ...) turns off in that process with ONE
    warning naming the symbol and the versions (`Switches.available`), and the run trains on;
  - a feature correctness needs (exact Keras mid-epoch resume, each worker's own tf-keras checkpoint writes) is
    refused at the task's start, before any step, as a configuration failure (never retried): `require` raises
    `PrivateApiMissing` with one line naming the TF/tf-keras version and the symbol. Never mid-run.
`tests/task/test_private_apis.py` checks every symbol against the installed versions (an upgrade fails raytf's
tests, not a user's run) and that the versions are the ones the table was verified with (`VERIFIED`).
docs/architecture.md's table is generated from this one: `python -m raytf._core.private_apis --write`.

No Ray, no TensorFlow at import: `lookup` imports the symbol's module by name, in the process that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from raytf._core.failure import CONFIG

# The versions every symbol below was last checked against (major.minor). tests/task/test_private_apis.py fails on
# others: re-check the table there, then update this.
VERIFIED = {"tensorflow": "2.21", "tf_keras": "2.21", "ray": "2.60"}
# Distribution names, for the version in a message when the package is not imported yet.
_DISTRIBUTIONS = {"tensorflow": ("tensorflow", "tensorflow-cpu", "tf-nightly"), "tf_keras": ("tf-keras", "tf_keras"),
                  "ray": ("ray",)}


@dataclass(frozen=True)
class Feature:
    """What a group of private symbols serves. `required`: correctness needs it (the run is refused at start
    without it); else it is optional and turns off."""

    key: str
    name: str
    without: str
    required: bool = False


@dataclass(frozen=True)
class PrivateApi:
    """One private symbol: `symbol` is "module:attribute.path". It has "changed" when `params` are not its leading
    parameters (raytf calls it positionally, or stands in for it), a name in `keywords` is not among its
    parameters, or a name in `uses` is not among the names its code uses (a global raytf replaces, an attribute
    raytf sets, a method raytf relies on being called)."""

    symbol: str
    feature: Feature
    use: str
    where: str
    params: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()

    @property
    def package(self) -> str:
        return self.symbol.split(".", 1)[0].split(":", 1)[0]

    @property
    def dotted(self) -> str:
        return self.symbol.replace(":", ".")


BREAKDOWN = Feature(
    "breakdown", "the step-time breakdown (metrics.breakdown)",
    "step rows carry step_time_s only: no input_wait_s, collective_s or compute_s (as with metrics.breakdown=false)")
KERAS_RESUME = Feature(
    "keras_resume", "exact Keras resume mid-epoch",
    "a Model.fit resumed from a checkpoint taken within an epoch (a preemption's save, checkpoint.every_steps) "
    "would train that epoch's saved steps again: refused at start", required=True)
OWN_WRITES = Feature(
    "own_writes", "each worker's own tf-keras checkpoint writes",
    "a worker that is not the chief would delete its ModelCheckpoint/BackupAndRestore saves and resume from "
    "another checkpoint than the chief: refused at start", required=True)
TENSOR_LOGS = Feature(
    "tensor_logs", "batch logs as tensors in raytf's Keras callback",
    "tf-keras converts every batch's logs to numpy for it: a device sync per step, not only on reported steps")
TF_CONFIG_GUARD = Feature(
    "tf_config_guard", "a script's own TF_CONFIG ignored (script mode)",
    "a script that assigns its own TF_CONFIG (hard-coded hosts) overrides raytf's: its tasks may not find each "
    "other")
EMBEDDED_AUTH = Feature(
    "embedded_auth", "token auth asked for explicitly on the embedded Ray",
    "raytf leaves the embedded Ray's auth mode to Ray (Ray 2.59+ turns token auth on for a new local cluster)")
AUTH_CHECK = Feature(
    "auth_check", "the warning about a Ray cluster without token auth",
    "no warning when the cluster joined accepts work without a token")
EMBEDDED = Feature(
    "embedded", "knowing that this process started its Ray (no autoscaler)",
    "a placement no node can host is waited for up to cluster.placement_timeout_s instead of failing at once")
DATA_COPY = Feature(
    "data_copy", "the caller's Ray datasets keep their own options",
    "raytf's execution options (no progress bars, the trainers' resources excluded) are set on the datasets "
    "passed to raytf.fit themselves")
DATA_EXCLUDE = Feature(
    "data_exclude", "Ray Data told what the trainers reserve (without a deprecation warning)",
    "raytf sets the public ExecutionOptions.exclude_resources instead, and Ray Data warns that it is deprecated")
DATA_ROWS = Feature(
    "data_rows", "a dataset's row count checked before anything is reserved",
    "a dataset whose rows do not divide among the workers is not refused up front (Ray Data drops the remainder)")
DATA_COORDINATORS = Feature(
    "data_coordinators", "Ray Data's split coordinators ended with their attempt",
    "they end when Ray collects them (their handles gone), a little later")
METRICS_INTERVAL = Feature(
    "metrics_interval", "Ray's metrics export interval (RAY_metrics_report_interval_ms)",
    "raytf's gauges are set again every 5 s (Ray's default interval, 10 s, halved)")
STANDBY_SLOTS = Feature(
    "standby_slots", "where standby processes can take a group's tasks (cluster.standby)",
    "every task starts in a new process (as with cluster.standby=0)")
ITERATOR_TEARDOWN = Feature(
    "iterator_teardown", "tf.data iterators torn down off the training thread",
    "a Keras fit (or an epoch's iterator) may stall up to 60 s at its end: TensorFlow's autotuning race (see "
    "raytf/_task/tfdata.py)")
AVOID_NODES = Feature(
    "avoid_nodes", "placing the next attempt away from hosts that stopped answering",
    "the next placement group may be offered a lost host Ray still counts alive, and waits for it")

FEATURES = (BREAKDOWN, KERAS_RESUME, OWN_WRITES, TENSOR_LOGS, TF_CONFIG_GUARD, EMBEDDED_AUTH, AUTH_CHECK, EMBEDDED,
            DATA_COPY, DATA_EXCLUDE, DATA_ROWS, DATA_COORDINATORS, METRICS_INTERVAL, STANDBY_SLOTS, AVOID_NODES,
            ITERATOR_TEARDOWN)

_T = "raytf/_task/timing.py"
_CB = "raytf/_task/keras_callback.py"
_RT = "raytf/_task/tf_runtime.py"
_DFU = "tf_keras.src.distribute.distributed_file_utils"
_CONNECT = "raytf/_driver/connect.py"
_DATA = "raytf/_driver/data.py"

# -- the step-time breakdown: the fetch and the all-reduce timed inside TF (every other TF call there is public)
OWNED_NEXT = PrivateApi(
    "tensorflow.python.data.ops.iterator_ops:OwnedIterator._next_internal", BREAKDOWN,
    "wrapped: tf.data's get_next, timed (input_wait_s)", _T, params=("self",))
DISTRIBUTED_NEXT = PrivateApi(
    "tensorflow.python.distribute.input_lib:DistributedIteratorBase.get_next", BREAKDOWN,
    "wrapped: tf.distribute's get_next, timed (input_wait_s)", _T, params=("self",))
ALL_REDUCE = PrivateApi(
    "tensorflow.python.distribute.cross_device_utils:CollectiveReplicaLauncher.all_reduce", BREAKDOWN,
    "wrapped: MWMS's dense all-reduce, timed from its input (collective_s)", _T, params=("self", "input_tensor"))
RESOURCE_VARIABLE = PrivateApi(
    "tensorflow.python.ops.resource_variable_ops:ResourceVariable", BREAKDOWN,
    "the traced graphs' CPU total: a plain variable the strategy's variable creators do not mirror", _T)
XLA_CONTEXT = PrivateApi(
    "tensorflow.python.ops.control_flow_util:GraphOrParentsInXlaContext", BREAKDOWN,
    "leaves XLA-compiled graphs untimed (XLA cannot compile the timestamp op)", _T, params=("graph",))
# -- exact Keras resume mid-epoch
KERAS_COUNTERS = PrivateApi(
    "tf_keras.src.engine.training:Model._maybe_load_initial_counters_from_ckpt", KERAS_RESUME,
    "asks model._training_state (which raytf sets) at which epoch and step fit starts", _CB,
    params=("self", "steps_per_epoch", "initial_epoch"),
    uses=("_training_state", "maybe_load_initial_counters_from_ckpt"))
KERAS_FIT = PrivateApi(
    "tf_keras.src.engine.training:Model.fit", KERAS_RESUME,
    "calls the above once its callbacks' on_train_begin ran", _CB, uses=("_maybe_load_initial_counters_from_ckpt",))
KERAS_TRAINING_STATE = PrivateApi(
    "tf_keras.src.distribute.worker_training_state:WorkerTrainingState.maybe_load_initial_counters_from_ckpt",
    KERAS_RESUME, "the interface raytf's stand-in for model._training_state implements", _CB,
    params=("self", "steps_per_epoch", "initial_epoch", "mode"))
# -- each worker's own tf-keras checkpoint writes
WRITE_DIRPATH = PrivateApi(
    f"{_DFU}:write_dirpath", OWN_WRITES,
    "replaced (a module global): a worker's own directory is written in place, not in a temporary one", _RT,
    params=("dirpath", "strategy"))
REMOVE_TEMP_DIRPATH = PrivateApi(
    f"{_DFU}:remove_temp_dirpath", OWN_WRITES, "replaced (a module global): a worker's own directory is kept", _RT,
    params=("dirpath", "strategy"))
WRITE_FILEPATH = PrivateApi(
    f"{_DFU}:write_filepath", OWN_WRITES,
    "ModelCheckpoint's path: must look write_dirpath up as a global at each call", _RT, uses=("write_dirpath",))
REMOVE_TEMP_DIR_WITH_FILEPATH = PrivateApi(
    f"{_DFU}:remove_temp_dir_with_filepath", OWN_WRITES,
    "ModelCheckpoint's clean-up: must look remove_temp_dirpath up as a global", _RT, uses=("remove_temp_dirpath",))
# -- the rest of the task's side
TF_LOGS = PrivateApi(
    "tf_keras.src.callbacks:CallbackList.__init__", TENSOR_LOGS,
    "reads a callback's _supports_tf_logs, which raytf's callback sets", _CB, uses=("_supports_tf_logs",))
CREATE_ITERATOR = PrivateApi(
    "tensorflow.python.data.ops.iterator_ops:OwnedIterator._create_iterator", ITERATOR_TEARDOWN,
    "wrapped: each eager iterator's _iterator_resource handle is dropped by a thread of its own when the iterator "
    "is collected", "raytf/_task/tfdata.py", params=("self", "dataset"), uses=("_iterator_resource",))
ENVIRON = PrivateApi(
    "os:_Environ", TF_CONFIG_GUARD, "subclassed: os.environ's class in a script's process keeps raytf's TF_CONFIG",
    "raytf/_task/script/child.py", params=("data", "encodekey"))
# -- the driver's side: Ray
RAYLET_CONFIG = PrivateApi(
    "ray._raylet:Config.initialize", EMBEDDED_AUTH,
    "re-reads RAY_AUTH_MODE after raytf sets it (as Ray's own authentication_token_setup does)", _CONNECT)
AUTH_MODE = PrivateApi(
    "ray._raylet:get_authentication_mode", AUTH_CHECK, "whether this process talks to Ray with token auth", _CONNECT)
AUTH_TOKEN = PrivateApi(
    "ray._raylet:AuthenticationMode.TOKEN", AUTH_CHECK, "(the value it is compared with)", _CONNECT)
GLOBAL_NODE = PrivateApi(
    "ray._private.worker:_global_node", EMBEDDED, "its .head: a head node started in this process", _CONNECT)
NODE_HEAD = PrivateApi(
    "ray._private.node:Node.__init__", EMBEDDED, "(where .head is set)", _CONNECT, keywords=("head",))
DATASET_COPY = PrivateApi(
    "ray.data.dataset:Dataset.copy", DATA_COPY, "copy(ds, _deep_copy=True): a dataset with its own DataContext",
    _DATA, params=("ds",), keywords=("_deep_copy",))
EXCLUDE_RESOURCES = PrivateApi(
    "ray.data:ExecutionOptions._set_exclude_resources", DATA_EXCLUDE,
    "what the trainers' placement group holds, excluded from Ray Data's budget (what Ray Train v1 sets)", _DATA,
    params=("self", "value"))
META_COUNT = PrivateApi(
    "ray.data.dataset:Dataset._meta_count", DATA_ROWS,
    "the row count Ray Data knows without executing (what Dataset.count tries first)", _DATA, params=("self",))
COORD_ACTOR = PrivateApi(
    "ray.data._internal.iterator.stream_split_iterator:StreamSplitDataIterator.__init__", DATA_COORDINATORS,
    "its ._coord_actor: the split's coordinator actor", _DATA, params=("self", "coord_actor"),
    uses=("_coord_actor",))
REPORT_INTERVAL = PrivateApi(
    "ray:_config.metrics_report_interval_ms", METRICS_INTERVAL,
    "how often Ray exports a process's metrics (a gauge not set for two intervals is dropped)",
    "raytf/_driver/raymetrics.py")
PG_TABLE = PrivateApi(
    "ray.util.placement_group:placement_group_table", STANDBY_SLOTS,
    "its \"bundles_to_node_id\": the node of each bundle", "raytf/_driver/placement.py",
    params=("placement_group",))
LABEL_SELECTOR = PrivateApi(
    "ray.util.placement_group:placement_group", AVOID_NODES,
    "bundle_label_selector with the ray.io/node-id label every node carries: \"!in(...)\" keeps bundles off those "
    "nodes", "raytf/_driver/placement.py", keywords=("bundle_label_selector",))

APIS: tuple[PrivateApi, ...] = (
    OWNED_NEXT, DISTRIBUTED_NEXT, ALL_REDUCE, RESOURCE_VARIABLE, XLA_CONTEXT,
    KERAS_COUNTERS, KERAS_FIT, KERAS_TRAINING_STATE,
    WRITE_DIRPATH, REMOVE_TEMP_DIRPATH, WRITE_FILEPATH, REMOVE_TEMP_DIR_WITH_FILEPATH,
    TF_LOGS, CREATE_ITERATOR, ENVIRON,
    RAYLET_CONFIG, AUTH_MODE, AUTH_TOKEN, GLOBAL_NODE, NODE_HEAD,
    DATASET_COPY, EXCLUDE_RESOURCES, META_COUNT, COORD_ACTOR, REPORT_INTERVAL, PG_TABLE, LABEL_SELECTOR,
)


class PrivateApiMissing(RuntimeError):
    """A private symbol raytf needs is missing or changed in the installed version. Raised by `require` (a
    feature correctness needs): a configuration failure, never retried (`failure_kind`)."""

    failure_kind = CONFIG


def by_feature(feature: Feature) -> list[PrivateApi]:
    return [a for a in APIS if a.feature == feature]


def _walk(symbol: str):
    module_name, _, path = symbol.partition(":")
    obj = importlib.import_module(module_name)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def problem(api: PrivateApi, resolve: Callable[[str], object] = _walk) -> str | None:
    """What is wrong with `api` in this process's installed version ("is missing", "changed: ..."), None if
    nothing. Imports its module."""
    try:
        obj = resolve(api.symbol)
    except (ImportError, AttributeError) as e:
        return f"is missing ({type(e).__name__}: {e})"
    if api.params or api.keywords:
        try:
            names = list(inspect.signature(obj).parameters)
        except (TypeError, ValueError) as e:
            return f"changed: no signature ({e})"
        if api.params and names[:len(api.params)] != list(api.params):
            return f"changed: its parameters are ({', '.join(names)}), not ({', '.join(api.params)}, ...)"
        absent = [k for k in api.keywords if k not in names]
        if absent:
            return f"changed: no parameter {', '.join(absent)}"
    if api.uses:
        code = getattr(inspect.unwrap(obj), "__code__", None)
        if code is None:
            return "changed: not Python code any more"
        absent = [n for n in api.uses if n not in _names(code)]
        if absent:
            return f"changed: its code no longer uses {', '.join(absent)}"
    return None


def _names(code) -> set[str]:
    """Every global and attribute name a code object uses, its nested functions' too, and the names it spells as
    strings (getattr(cb, "_supports_tf_logs", False))."""
    out = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            out |= _names(const)
        elif isinstance(const, str) and const.isidentifier():
            out.add(const)
    return out


_found: dict[str, object] = {}


def lookup(api: PrivateApi):
    """The symbol itself (checked once per process); raises PrivateApiMissing (with `problem`'s words) if it is
    missing or changed."""
    if api.symbol not in _found:
        why = problem(api)
        if why is not None:
            raise PrivateApiMissing(f"{api.dotted} {why}")
        _found[api.symbol] = _walk(api.symbol)
    return _found[api.symbol]


def owner(api: PrivateApi) -> tuple[object, str]:
    """(the object that holds the symbol, its attribute name): what raytf patches (a class and its method, a module
    and its global), once `problem` said it is there."""
    module, _, path = api.symbol.partition(":")
    holder, _, last = path.rpartition(".")
    return (_walk(f"{module}:{holder}") if holder else importlib.import_module(module)), last


def version(package: str) -> str:
    """The installed version of `package` ("?" if unknown): the imported module's, else the distribution's."""
    if package == "os":
        import platform

        return platform.python_version()
    module = sys.modules.get(package)
    found = getattr(module, "__version__", None) if module is not None else None
    if found:
        return str(found)
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    for dist in _DISTRIBUTIONS.get(package, (package,)):
        try:
            return dist_version(dist)
        except PackageNotFoundError:
            continue
    return "?"


def _versions(packages) -> str:
    """"tensorflow 2.22.0, tf_keras 2.22.0" for the packages a feature's symbols come from (and TF with tf-keras:
    the two move together)."""
    wanted = list(dict.fromkeys(packages))
    if "tf_keras" in wanted and "tensorflow" not in wanted:
        wanted.insert(0, "tensorflow")
    return ", ".join(f"{p} {version(p)}" for p in wanted)


def _verified(packages) -> str:
    return ", ".join(f"{p} {VERIFIED[p]}" for p in dict.fromkeys(packages) if p in VERIFIED)


def off_line(api: PrivateApi, why: str) -> str:
    """The one warning of an optional feature turned off."""
    verified = _verified([api.package])
    return (f"{api.dotted} {why} ({_versions([api.package])}; raytf was verified with {verified or 'others'}): "
            f"{api.feature.name} is off: {api.feature.without}")


def refusal_line(api: PrivateApi, why: str) -> str:
    """The one line of a run refused for a feature correctness needs."""
    verified = _verified(["tensorflow", "tf_keras"] if api.package == "tf_keras" else [api.package])
    return (f"{_versions([api.package])}: {api.dotted} {why}; raytf needs it for {api.feature.name} ("
            f"without it {api.feature.without.split(': refused')[0]}). Fix: install the versions raytf was "
            f"verified with ({verified}), or a raytf that supports these")


def require(feature: Feature) -> None:
    """Raise PrivateApiMissing (a configuration failure: never retried) with one line naming the versions and the
    symbol when any of the `feature`'s symbols is missing or changed. For the features correctness needs, at the
    task's start."""
    for api in by_feature(feature):
        why = problem(api)
        if why is not None:
            raise PrivateApiMissing(refusal_line(api, why))


class Switches:
    """A process's optional features: each is checked once (all its symbols), and one that cannot work is off with
    one warning (through `warn`), for the rest of the process. `turn_off` for a failure found later (a traced
    call that raised)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, bool] = {}  # feature key -> available

    def available(self, feature: Feature, warn: Callable[[str], None]) -> bool:
        with self._lock:
            known = self._state.get(feature.key)
        if known is not None:
            return known
        for api in by_feature(feature):
            why = problem(api)
            if why is not None:
                self.turn_off(api, why, warn)
                return False
        with self._lock:
            return self._state.setdefault(feature.key, True)

    def turn_off(self, api: PrivateApi, why: str, warn: Callable[[str], None]) -> None:
        with self._lock:
            first = self._state.get(api.feature.key) is not False
            self._state[api.feature.key] = False
        if first:
            warn(off_line(api, why))

    def is_off(self, feature: Feature) -> bool:
        with self._lock:
            return self._state.get(feature.key) is False

    def reset(self) -> None:
        """Forget what was checked (tests)."""
        with self._lock:
            self._state.clear()
        _found.clear()


# This process's switches: features are per process (each task's, the driver's).
SWITCHES = Switches()


def available(feature: Feature, warn: Callable[[str], None]) -> bool:
    return SWITCHES.available(feature, warn)


# -- docs/architecture.md's table ---------------------------------------------------------------------------------
BEGIN = "<!-- private-apis:begin (generated by `python -m raytf._core.private_apis --write`: edit that module) -->"
END = "<!-- private-apis:end -->"
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def table() -> str:
    """The markdown table: one row per symbol, its feature and what happens without it."""
    rows = ["| symbol | where | what raytf uses it for | feature | without it |", "|---|---|---|---|---|"]
    for a in APIS:
        kind = "**required**: " if a.feature.required else ""
        rows.append(f"| `{a.dotted}` | `{a.where}` | {a.use} | {a.feature.name} | {kind}{a.feature.without} |")
    return "\n".join(rows)


def block() -> str:
    return f"{BEGIN}\n{table()}\n{END}"


def doc_block(text: str) -> str | None:
    """The generated block in `text` (docs/architecture.md), markers included; None without its markers."""
    start, end = text.find(BEGIN), text.find(END)
    return text[start:end + len(END)] if 0 <= start < end else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raytf._core.private_apis",
                                     description="docs/architecture.md's table of the private APIs raytf touches")
    parser.add_argument("--write", action="store_true", help="rewrite the table in docs/architecture.md")
    args = parser.parse_args(argv)
    if not args.write:
        sys.stdout.write(block() + "\n")
        return 0
    text = ARCHITECTURE.read_text()
    old = doc_block(text)
    if old is None:
        sys.stderr.write(f"{ARCHITECTURE}: no {BEGIN!r} ... {END!r} markers\n")
        return 2
    ARCHITECTURE.write_text(text.replace(old, block()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
