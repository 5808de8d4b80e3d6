"""Whether a checkpoint fits the objects it is restored into (raytf issue 71): a relaunch of a run whose program
changed (a layer added or removed) must not resume silently. `tf.train.Checkpoint.read(...).expect_partial()`, which
the resume needs (optimizer slots are made at the first step and restored then), ignores what the checkpoint holds
and the model lacks, and leaves what the model holds and the checkpoint lacks at its fresh values. A changed
shape already fails in TensorFlow's restore; this names the rest.

The checkpoint's object graph (its `_CHECKPOINTABLE_OBJECT_GRAPH` entry: every object, its children by name, the
values it holds) is walked beside the live objects, child name by child name (tf.train.TrackableView's children),
so an object reached by two paths (Keras 3 keys a layer's kernel under the optimizer too) is matched once:
  - **the checkpoint has, the model lacks**: a saved child holding values that a live, built Keras layer does not
    have, or an object the program no longer gives ctx.restore. Only there: an optimizer or a model not yet built
    makes its variables at its first step, and TensorFlow restores them then (deferred restoration), so their
    absence now says nothing;
  - **the model has, the checkpoint lacks**: a live variable no saved object was matched to.
Parsing the graph needs TensorFlow's own proto module (not in the tf.* API: the private-API table's RESTORE_FIT);
without it the check is off with one warning and the restore is TensorFlow's as before."""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

import tensorflow as tf

from raytf._core import failure
from raytf._core import private_apis as apis
from raytf.errors import ConfigError

log = logging.getLogger(__name__)

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
SHOWN = 4  # paths named in the line, per side; the count says how many more
# tf.train.Checkpoint's own counter (made by a save(), absent from a write()'s checkpoint): not the program's state
BOOKKEEPING = "save_counter"


class CheckpointMismatch(ConfigError):
    """The checkpoint resumed from does not fit the program's objects: a configuration failure, never retried (the
    program or the settings must change: checkpoint.partial_restore, or a new run.name)."""

    failure_kind = failure.CONFIG


@dataclass(frozen=True)
class Fit:
    """What did not match: `extra`, paths the checkpoint holds that the live objects lack; `missing`, live variables'
    paths the checkpoint lacks. Both empty: it fits."""

    extra: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return not (self.extra or self.missing)

    def held_by_the_model(self) -> Fit:
        """Only what the model has and the checkpoint lacks (an evaluator's model, built for predictions, lacks the
        training's optimizer: no mismatch)."""
        return Fit(missing=self.missing)

    def line(self, name: str, *, refused: bool = True) -> str:
        """One line for checkpoint `name` that does not fit: the refusal and its fix, or (`refused` false: the
        partial restore asked for) what the resume goes on without."""
        sides = []
        if self.extra:
            sides.append(f"the checkpoint holds {_listed(self.extra)} that the model lacks")
        if self.missing:
            sides.append(f"the model has {_listed(self.missing)} that the checkpoint lacks")
        if not refused:
            return (f"resuming from {name} anyway (checkpoint.partial_restore=true), though {'; '.join(sides)}: "
                    f"what the model lacks is ignored, what the checkpoint lacks keeps its fresh values")
        return (f"{name} does not fit the program's model (was it changed since the run began?): {'; '.join(sides)}. "
                f"Fix: run.name=<a new name> to train the changed model afresh, or "
                f"checkpoint.partial_restore=true to resume anyway (what the model lacks is ignored, what the "
                f"checkpoint lacks keeps its fresh values)")


def _listed(paths: tuple[str, ...]) -> str:
    shown = ", ".join(paths[:SHOWN])
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return f"{len(paths)} variable{'s' if len(paths) != 1 else ''} ({shown}{more})"


def check(root: tf.train.Checkpoint, prefix: str) -> Fit:
    """How the checkpoint at `prefix` fits `root`'s objects; Fit() (fits) when the check cannot run here (warned
    once: the restore is then TensorFlow's as before, never refused for the check's own failure)."""
    if not apis.available(apis.RESTORE_FIT, log.warning):
        return Fit()
    try:
        graph = apis.lookup(apis.CHECKPOINT_GRAPH)()
        graph.ParseFromString(tf.train.load_checkpoint(prefix).get_tensor(GRAPH_KEY))
        return compare(root, graph)
    except Exception as e:  # (a checkpoint without the graph, a proto that changed: the check is off, not the run)
        apis.SWITCHES.turn_off(apis.CHECKPOINT_GRAPH, f"changed: {type(e).__name__}: {e}", log.warning)
        return Fit()


def compare(root, graph) -> Fit:
    """The walk (see the module's docstring) over a parsed TrackableObjectGraph `graph` and the live `root`."""
    nodes = graph.nodes
    holds = _holding_values(nodes)
    matched: set[int] = set()  # live objects some saved value was matched to (by id), and what they hold
    lacking: dict[int, tuple[str, ...]] = {}  # saved nodes the live objects lack where that says something
    seen: set[int] = set()  # saved nodes matched to a live object
    queue = deque([(0, root, (), True)])  # (saved node, live object, path, whether a lacking child says something)
    while queue:
        node_id, obj, path, telling = queue.popleft()
        if node_id in seen:
            continue
        seen.add(node_id)
        if nodes[node_id].attributes or _is_variable(obj):  # a value: what holds it (a sharded variable too) matched
            matched.update(id(v) for _, v in _live_variables(obj))
            matched.add(id(obj))
            continue
        # Under an optimizer or a layer not built yet, a lacking child is made at the first step (and restored
        # then); a built layer has all its variables; anything else (a list, a tf.Module) tells what its parent does.
        if _is_optimizer(obj) or (_is_layer(obj) and not _built(obj)):
            telling = False
        elif _is_layer(obj):
            telling = True
        live = _children(obj)
        for ref in nodes[node_id].children:
            child_path = (*path, ref.local_name)
            if ref.local_name in live:
                queue.append((ref.node_id, live[ref.local_name], child_path, telling))
            elif telling and ref.node_id in holds and (path or ref.local_name != BOOKKEEPING):
                lacking.setdefault(ref.node_id, child_path)
    # (a node lacking under one name may be matched under another: Keras 3 keys a kernel under the optimizer too)
    extra = [p for start, path in lacking.items() if start not in seen
             for p in _value_paths(nodes, start, path, holds, seen)]
    return Fit(tuple(dict.fromkeys(extra)), tuple(p for p, v in _live_variables(root) if id(v) not in matched))


def _holding_values(nodes) -> set[int]:
    """The saved nodes that hold a value or have a descendant that does."""
    parents: dict[int, set[int]] = {}
    for i, node in enumerate(nodes):
        for ref in node.children:
            parents.setdefault(ref.node_id, set()).add(i)
    holds: set[int] = set()
    todo = [i for i, node in enumerate(nodes) if node.attributes]
    while todo:
        i = todo.pop()
        if i not in holds:
            holds.add(i)
            todo.extend(parents.get(i, ()))
    return holds


def _value_paths(nodes, start: int, path: tuple[str, ...], holds: set[int], matched: set[int]) -> list[str]:
    """The paths of the saved values under node `start` (at `path`) that no live object was `matched` to."""
    out, walked = [], set()
    queue = deque([(start, path)])
    while queue:
        node_id, p = queue.popleft()
        if node_id in walked or node_id in matched:
            continue
        walked.add(node_id)
        if nodes[node_id].attributes:
            out.append("/".join(p))
        queue.extend((ref.node_id, (*p, ref.local_name)) for ref in nodes[node_id].children if ref.node_id in holds)
    return out


def _live_variables(root):
    """(path, variable) of every variable reachable from `root`, each once, breadth first (as TF names its keys)."""
    seen: set[int] = set()
    queue = deque([((), root)])
    while queue:
        path, obj = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if _is_variable(obj):
            yield "/".join(path), obj
            continue
        queue.extend(((*path, name), child) for name, child in _children(obj).items()
                     if path or name != BOOKKEEPING)


def _children(obj) -> dict:
    if not isinstance(obj, tf.__internal__.tracking.Trackable):
        return {}
    return dict(tf.train.TrackableView(obj).children(obj))


def _is_variable(obj) -> bool:
    # A Keras 3 variable wraps its tf.Variable (keras.Variable is not one): either holds a value.
    return isinstance(obj, tf.Variable) or (type(obj).__name__ == "Variable" and hasattr(obj, "_value")
                                            and type(obj).__module__.startswith("keras"))


def _is_layer(obj) -> bool:
    return any(c.__name__ == "Layer" for c in type(obj).__mro__)


def _built(obj) -> bool:
    return bool(getattr(obj, "built", False))


def _is_optimizer(obj) -> bool:
    return any(c.__name__ in ("Optimizer", "OptimizerV2", "BaseOptimizer") for c in type(obj).__mro__)
