"""Keras 3 on a cluster (raytf issue 72): which trainer the installed Keras has, read from its source (the two lines
raytf corrects, an upstream fix, or something else), and the one-line refusals and warning. Pure."""

from raytf._core import keras3

# The two functions as Keras 3.5-3.16 write them (keras/src/backend/tensorflow/trainer.py), abridged.
SYMBOLIC_BUILD = '''
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is not None:
            for _, _, it in iterator:
                maybe_distributed_data_batch = next(it)
                if all(tree.flatten(has_distributed_values)):
                    data_batch = self.distribute_strategy.reduce(
                        "MEAN",
                        maybe_distributed_data_batch,
                        axis=None,
                    )
'''
REDUCE = '''
def reduce_per_replica(values, strategy, reduction):
    def _reduce(v):
        if _collective_all_reduce_multi_worker(strategy):
            if reduction == "concat":
                return _multi_worker_concat(v, strategy)
            elif reduction == "mean":
                return strategy.reduce("MEAN", v, axis=0)
'''


def test_the_trainer_is_recognised_by_the_two_lines_it_corrects():
    assert keras3.recognise(SYMBOLIC_BUILD, REDUCE) is keras3.Trainer.CORRECTABLE
    # Fixed upstream: both lines gone (the batch's local part taken, axis=None): nothing to correct.
    fixed_build = SYMBOLIC_BUILD.replace("self.distribute_strategy.reduce(", "local_results(")
    fixed_reduce = REDUCE.replace("axis=0", "axis=None")
    assert keras3.recognise(fixed_build, fixed_reduce) is keras3.Trainer.FIXED
    # One without the other, or a source not readable: not the trainer the correction knows.
    assert keras3.recognise(fixed_build, REDUCE) is keras3.Trainer.UNKNOWN
    assert keras3.recognise(SYMBOLIC_BUILD, fixed_reduce) is keras3.Trainer.UNKNOWN
    assert keras3.recognise(None, REDUCE) is keras3.Trainer.UNKNOWN
    # raytf's stand-in repeats how Keras takes the first batch: another way of taking it is not the trainer known.
    other_loop = SYMBOLIC_BUILD.replace("for _, _, it in iterator:", "for it in iterator:")
    assert keras3.recognise(other_loop, REDUCE) is keras3.Trainer.UNKNOWN
    # A comment quoting the old line is not the line.
    assert keras3.recognise(fixed_build, fixed_reduce + '    # was strategy.reduce("MEAN", v, axis=0)\n') \
        is keras3.Trainer.FIXED


def test_the_installed_keras_is_the_correctable_one():
    """Keras's own source, as installed (requirements/test.txt pins it): the lines are where the correction looks."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("keras")
    source = (Path(spec.origin).parent / "src/backend/tensorflow/trainer.py").read_text()
    build = source[source.index("    def _maybe_symbolic_build("):source.index("    def _aggregate_additional_loss(")]
    reduce = source[source.index("def reduce_per_replica("):source.index("def _multi_worker_concat(")]
    assert keras3.recognise(build, reduce) is keras3.Trainer.CORRECTABLE


def test_what_cannot_train_is_refused_in_one_line_naming_the_fix():
    ps = keras3.parameter_server_refusal("3.15.1", "2.21.0")
    assert ps.startswith("Keras 3 (keras 3.15.1) cannot run Model.fit under ParameterServerStrategy")
    assert "Model.evaluate under" in keras3.parameter_server_refusal("3.15.1", None, "evaluate")
    assert "`import tf_keras as keras` (tf-keras 2.21.0 is installed)" in ps and keras3.UPSTREAM in ps
    assert "cluster.strategy=multi_worker_mirrored" in ps and "\n" not in ps
    assert "pip install tf-keras" in keras3.parameter_server_refusal("3.15.1", None)
    spe = keras3.steps_per_execution_refusal("3.15.1", 4)
    assert "steps_per_execution=4" in spe and keras3.STEPS_PER_EXECUTION_UPSTREAM in spe
    assert "steps_per_execution=1" in spe and "\n" not in spe
    unknown = keras3.unknown_trainer_refusal("3.99.0", "x.y is missing", None)
    assert "keras 3.99.0" in unknown and "x.y is missing" in unknown and "(3.15)" in unknown
    assert "\n" not in unknown
    writes = keras3.unknown_callbacks_refusal("3.99.0", "x.y changed", "2.21.0")
    assert "ModelCheckpoint and BackupAndRestore" in writes and "x.y changed" in writes and "\n" not in writes


def test_batch_normalization_that_does_not_synchronize_is_said_once_with_the_fix():
    line = keras3.batch_norm_hint([f"bn{i}" for i in range(5)])
    assert "bn0, bn1, bn2 and 2 more" in line and "synchronized=True" in line and "\n" not in line


def test_the_tasks_a_task_trains_with():
    two = {"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 0}}
    assert keras3.cluster_tasks(two) == 2
    assert keras3.cluster_tasks('{"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}}') == 1
    assert keras3.cluster_tasks("not json") == 0 and keras3.cluster_tasks(None) == 0
    assert keras3.cluster_tasks({**two, "task": {"type": "evaluator", "index": 0}}) == 0  # (it trains with nobody)
