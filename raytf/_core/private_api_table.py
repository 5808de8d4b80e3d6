"""The table of raytf/_core/private_apis.py (which callers name; it re-exports every name here): every private API of
TensorFlow, tf-keras, Keras 3 (its part: _core/private_api_keras3.py) and Ray raytf touches, the feature each serves
and what happens without it. Pure data."""

from __future__ import annotations

# Keras 3's part of the table (its names are this module's too).
from raytf._core.private_api_keras3 import *  # noqa: F403
from raytf._core.private_api_keras3 import KERAS3_APIS, KERAS3_FEATURES

# The records (and the versions checked against), re-exported: callers name private_apis, which names this.
from raytf._core.private_api_record import DISTRIBUTIONS, VERIFIED, Feature, PrivateApi  # noqa: F401

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
DATA_PLAN = Feature(
    "data_plan", "knowing whether a dataset runs Ray Data tasks (its logical plan's operators)",
    "every dataset is taken to run tasks: with no CPU free beside the tasks, its wait is said even when it needs none")
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
DRAIN_NOTICES = Feature(
    "drain_notices", "acting on a node's drain notice (a spot node's preemption) before the node goes",
    "a drained node's tasks are lost when it goes: the attempt fails then and resumes from the last checkpoint")
INFEASIBLE_REQUESTS = Feature(
    "infeasible_requests", "a request no node type of the cluster's autoscaler offers failed at once",
    "such a request is waited for up to cluster.placement_timeout_s, then fails with what the nodes lack")
INFEASIBLE_EVENTS = Feature(
    "infeasible_events", "a request the v1 autoscaler says no node type can fulfil failed at once (its event)",
    "on a cluster with Ray's v1 autoscaler (ray up's, KubeRay's default) such a request is waited for up to "
    "cluster.placement_timeout_s, then fails with what the nodes lack")

SIGNALS_KEPT = Feature(
    "signals_kept", "the CLI's SIGTERM handler kept while Ray starts or connects",
    "a SIGTERM in a launch's first seconds meets Ray's own handler (sys.exit) inside ray.init: the launch still "
    "stops and takes its Ray down, from wherever ray.init was")

RESTORE_FIT = Feature(
    "restore_fit", "a resume that does not fit the model named before the first step (checkpoint.partial_restore)",
    "a changed model resumes as tf.train.Checkpoint allows (a changed shape still fails): variables added or "
    "removed since the checkpoint are not named, the added ones train from their fresh values")

RAY_TRAIN_LOOPS = Feature(
    "ray_train_loops", "a Ray Train loop in raytf (raytf.compat: ray.train.report and its siblings reach raytf)",
    "raytf.compat refuses the run on the driver, before anything starts, in one line (RayTrainMoved); raytf's own "
    "API is not touched", required=True)
RAY_TRAIN_V1 = Feature(
    "ray_train_v1", "Ray Train v1's ray.train.report and its siblings reaching raytf too (a loop's process that "
    "imported ray.train with RAY_TRAIN_V2_ENABLED=0)",
    "only v2's reach raytf: a run whose driver or task has RAY_TRAIN_V2_ENABLED=0 is refused in one line "
    "(RayTrainMoved)")

FEATURES = (BREAKDOWN, KERAS_RESUME, OWN_WRITES, TENSOR_LOGS, TF_CONFIG_GUARD, EMBEDDED_AUTH, AUTH_CHECK, EMBEDDED,
            DATA_COPY, DATA_EXCLUDE, DATA_ROWS, DATA_PLAN, DATA_COORDINATORS, METRICS_INTERVAL, STANDBY_SLOTS,
            AVOID_NODES, ITERATOR_TEARDOWN, DRAIN_NOTICES, INFEASIBLE_REQUESTS, INFEASIBLE_EVENTS, SIGNALS_KEPT,
            RESTORE_FIT, RAY_TRAIN_LOOPS, RAY_TRAIN_V1, *KERAS3_FEATURES)

_T = "raytf/_task/timing.py"
_CB = "raytf/_task/keras_callback.py"
_RT = "raytf/_task/tf_runtime.py"
_DFU = "tf_keras.src.distribute.distributed_file_utils"
_CONNECT = "raytf/_driver/connect.py"
_DATA = "raytf/_driver/data.py"
_FN_UTILS = "ray.train.v2._internal.execution.train_fn_utils"
_RTP = "raytf/_task/ray_train_private.py"

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
LOGICAL_PLAN = PrivateApi(
    "ray.data.dataset:Dataset.__init__", DATA_PLAN,
    "its ._logical_plan, whose .dag is the dataset's last operator (each with .input_dependencies)", _DATA,
    uses=("_logical_plan",))
FROM_BLOCKS = PrivateApi(
    "ray.data._internal.logical.operators.from_operators:AbstractFrom", DATA_PLAN,
    "the operator of from_items, from_pandas, from_numpy, from_arrow...: blocks that exist, read by no task", _DATA)
MATERIALIZED = PrivateApi(
    "ray.data._internal.logical.operators.input_data_operator:InputData", DATA_PLAN,
    "a materialized dataset's operator: blocks that exist, read by no task", _DATA)
INPUTS = PrivateApi(
    "ray.data._internal.logical.interfaces.logical_operator:LogicalOperator.input_dependencies", DATA_PLAN,
    "an operator's inputs (the plan walked back to its sources; Limit, by its class name, runs no task)", _DATA)
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
    "its \"bundles_to_node_id\": the node of each bundle (and each group's \"name\", \"state\" and \"bundles\": who "
    "holds what a placement timeout's line names; without them the line names what is free only)",
    "raytf/_driver/placement.py",
    params=("placement_group",))
INFEASIBLE = PrivateApi(
    "ray._raylet:InnerGcsClient.get_cluster_status", INFEASIBLE_REQUESTS,
    "the GCS's GetClusterStatusReply (autoscaler_pb2), whose autoscaling_state.infeasible_gang_resource_requests "
    "lists the placement groups Ray's autoscaler (v2) can add no node for (ray.autoscaler.v2.sdk's "
    "get_cluster_status leaves that part out)", "raytf/_driver/nodes.py")
LOG_SUBSCRIBER = PrivateApi(
    "ray._raylet:GcsLogSubscriber", INFEASIBLE_EVENTS,
    "the GCS's log channel, as the driver's own log printer reads it (subscribe, poll(timeout=), close): the "
    "autoscaler's lines (pid \"autoscaler\"), whose events start with ray_constants.LOG_PREFIX_EVENT_SUMMARY",
    "raytf/_driver/nodes.py")
INFEASIBLE_EVENT = PrivateApi(
    "ray.autoscaler._private.autoscaler:StandardAutoscaler._report_pending_infeasible", INFEASIBLE_EVENTS,
    "the v1 autoscaler's event \"Error: No available node types can fulfill resource request {...}\" for a "
    "request no node type can hold, every 30 s while it stands (raytf/_core/plan.py: never_request parses it)",
    "raytf/_core/plan.py", uses=("add_once_per_interval", "is_feasible"))
DRAINING_NODES = PrivateApi(
    "ray._private.state:GlobalState.get_draining_nodes", DRAIN_NOTICES,
    "{node id: deadline in ms (0: none)} of the nodes Ray drains (what Ray Train 2.60's PreemptionWatcher reads)",
    "raytf/_driver/nodes.py", params=("self",))
LABEL_SELECTOR = PrivateApi(
    "ray.util.placement_group:placement_group", AVOID_NODES,
    "bundle_label_selector with the ray.io/node-id label every node carries: \"!in(...)\" keeps bundles off those "
    "nodes", "raytf/_driver/placement.py", keywords=("bundle_label_selector",))
SIGTERM_HANDLER = PrivateApi(
    "ray._private.utils:set_sigterm_handler", SIGNALS_KEPT,
    "a no-op while ray.init runs: what ray.init calls first to put its own SIGTERM handler (sys.exit(15)) in "
    "place of the process's", "raytf/_driver/signals.py", params=("sigterm_handler",))
# -- a resume that does not fit the model (the object graph a checkpoint holds, parsed: its proto class is not in tf.*)
CHECKPOINT_GRAPH = PrivateApi(
    "tensorflow.core.protobuf.trackable_object_graph_pb2:TrackableObjectGraph", RESTORE_FIT,
    "parses a checkpoint's _CHECKPOINTABLE_OBJECT_GRAPH entry (its objects, their children, their values)",
    "raytf/_task/restore_fit.py")
# -- Ray Train v2's seam behind ray.train.report, get_checkpoint, get_context, get_dataset_shard (raytf.compat;
# ray/train/v2/api/train_fn_utils.py asks get_train_fn_utils() for the process's TrainFnUtils and calls it)
TRAIN_FN_UTILS = PrivateApi(
    f"{_FN_UTILS}:TrainFnUtils", RAY_TRAIN_LOOPS,
    "subclassed: raytf's bridge (raytf/_task/raytrain.py) implements it for a Ray Train loop in a raytf task", _RTP)
SET_TRAIN_FN_UTILS = PrivateApi(
    f"{_FN_UTILS}:set_train_fn_utils", RAY_TRAIN_LOOPS,
    "puts raytf's bridge behind ray.train's public functions for the loop's duration", _RTP,
    params=("train_fn_utils",))
GET_TRAIN_FN_UTILS = PrivateApi(
    f"{_FN_UTILS}:get_train_fn_utils", RAY_TRAIN_LOOPS,
    "what ray.train's public functions call to find the bridge (raytf relies on them asking it)", _RTP)
IS_V2_ENABLED = PrivateApi(
    "ray.train.v2._internal.constants:is_v2_enabled", RAY_TRAIN_LOOPS,
    "whether this process's env makes ray.train.report Ray Train v1's (RAY_TRAIN_V2_ENABLED=0): then a Ray without "
    "v1's seam below is refused", _RTP)
# -- Ray Train v1's seam, set beside v2's (RAY_TRAIN_V2_ENABLED=0 when a process imported ray.train: ray/train/
# __init__.py binds ray/train/_internal/session.py's functions, and ray/train/context.py's TrainContext calls that
# module's getters): each asks get_session() for the module global _session and reads it
_V1 = "ray.train._internal.session"
_LOOP = "raytf/_task/raytrain.py"
V1_SESSION = PrivateApi(
    f"{_V1}:_session", RAY_TRAIN_V1,
    "set (a module global) to raytf's stand-in for v1's _TrainSession for the loop's duration, then restored", _RTP)
V1_GET_SESSION = PrivateApi(
    f"{_V1}:get_session", RAY_TRAIN_V1, "what v1's functions call to find it: must read the global", _RTP,
    uses=("_session",))
V1_REPORT = PrivateApi(
    f"{_V1}:report", RAY_TRAIN_V1,
    "v1's ray.train.report: calls get_session().report(metrics, checkpoint=...), which raytf's bridge answers", _LOOP,
    params=("metrics",), keywords=("checkpoint",), uses=("get_session", "report"))
V1_GET_CHECKPOINT = PrivateApi(
    f"{_V1}:get_checkpoint", RAY_TRAIN_V1, "v1's ray.train.get_checkpoint: reads the session's loaded_checkpoint",
    _LOOP, uses=("get_session", "loaded_checkpoint"))
V1_GET_DATASET_SHARD = PrivateApi(
    f"{_V1}:get_dataset_shard", RAY_TRAIN_V1,
    "v1's ray.train.get_dataset_shard: calls the session's get_dataset_shard(dataset_name)", _LOOP,
    params=("dataset_name",), uses=("get_session", "get_dataset_shard"))
V1_SESSION_RANKS = PrivateApi(
    f"{_V1}:_TrainSession.__init__", RAY_TRAIN_V1,
    "the attributes v1's get_context() reads of the session (get_world_rank: world_rank, ...; get_experiment_name: "
    "experiment_name), which raytf's stand-in answers", _LOOP,
    uses=("world_rank", "world_size", "local_rank", "local_world_size", "node_rank"))

APIS: tuple[PrivateApi, ...] = (
    OWNED_NEXT, DISTRIBUTED_NEXT, ALL_REDUCE, RESOURCE_VARIABLE, XLA_CONTEXT,
    KERAS_COUNTERS, KERAS_FIT, KERAS_TRAINING_STATE,
    WRITE_DIRPATH, REMOVE_TEMP_DIRPATH, WRITE_FILEPATH, REMOVE_TEMP_DIR_WITH_FILEPATH,
    TF_LOGS, CREATE_ITERATOR, ENVIRON,
    RAYLET_CONFIG, AUTH_MODE, AUTH_TOKEN, GLOBAL_NODE, NODE_HEAD,
    DATASET_COPY, EXCLUDE_RESOURCES, META_COUNT, LOGICAL_PLAN, FROM_BLOCKS, MATERIALIZED, INPUTS,
    COORD_ACTOR, REPORT_INTERVAL, PG_TABLE, DRAINING_NODES, INFEASIBLE,
    LOG_SUBSCRIBER, INFEASIBLE_EVENT,
    LABEL_SELECTOR, SIGTERM_HANDLER, CHECKPOINT_GRAPH,
    TRAIN_FN_UTILS, SET_TRAIN_FN_UTILS, GET_TRAIN_FN_UTILS, IS_V2_ENABLED,
    V1_SESSION, V1_GET_SESSION, V1_REPORT, V1_GET_CHECKPOINT, V1_GET_DATASET_SHARD, V1_SESSION_RANKS,
    *KERAS3_APIS,
)


def by_feature(feature: Feature) -> list[PrivateApi]:
    return [a for a in APIS if a.feature == feature]


# What private_apis re-exports: the table's own names (not what this module imports).
_OWN = ("APIS", "DISTRIBUTIONS", "FEATURES", "VERIFIED", "Feature", "PrivateApi", "by_feature")
__all__ = sorted(name for name, value in list(globals().items())
                 if isinstance(value, (Feature, PrivateApi)) or name in _OWN)
