"""The failure policy (pure)."""

import pytest

from raytf._core import failure as f
from raytf.config import FailureConfig


def decide(**kw):
    args = dict(kind=f.SYSTEM, error_type="", attempt=1, progressed=True, failures_so_far=0, cfg=FailureConfig())
    args.update(kw)
    return f.decide(**args).decision


@pytest.mark.parametrize("kind", [f.SYSTEM, f.PEER, f.HANG, f.STARTUP])
def test_infrastructure_failures_are_retried_within_budget(kind):
    assert decide(kind=kind) is f.Decision.RETRY
    assert decide(kind=kind, failures_so_far=2) is f.Decision.RETRY
    assert decide(kind=kind, failures_so_far=3) is f.Decision.RAISE
    assert decide(kind=kind, failures_so_far=1000, cfg=FailureConfig(max_failures=-1)) is f.Decision.RETRY
    assert decide(kind=kind, cfg=FailureConfig(max_failures=0)) is f.Decision.RAISE


@pytest.mark.parametrize("error_type", ["ImportError", "ModuleNotFoundError", "SyntaxError", "NameError"])
def test_code_errors_are_never_retried(error_type):
    assert decide(kind=f.USER, error_type=error_type, attempt=3) is f.Decision.RAISE


def test_user_error_before_the_first_step_of_the_first_attempt_is_final():
    assert decide(kind=f.USER, error_type="ValueError", attempt=1, progressed=False) is f.Decision.RAISE
    # Later attempts may fail early because of the failure being recovered from: retry.
    assert decide(kind=f.USER, error_type="UnavailableError", attempt=2, progressed=False) is f.Decision.RETRY


@pytest.mark.parametrize("error_type", ["UnavailableError", "AbortedError", "DeadlineExceededError", "OSError",
                                        "StorageError", "ConnectionResetError"])
def test_transient_user_errors_after_progress_are_retried(error_type):
    assert decide(kind=f.USER, error_type=error_type) is f.Decision.RETRY
    assert decide(kind=f.USER, error_type=error_type, failures_so_far=3) is f.Decision.RAISE  # within the budget


@pytest.mark.parametrize("error_type", ["KeyError", "ValueError", "RuntimeError", "FileNotFoundError", "exit 3"])
def test_other_user_errors_are_not_retried_unless_asked(error_type):
    v = f.decide(kind=f.USER, error_type=error_type, attempt=2, progressed=True, failures_so_far=0,
                 cfg=FailureConfig())
    assert v.decision is f.Decision.RAISE and "not a transient error" in v.reason
    assert decide(kind=f.USER, error_type=error_type, cfg=FailureConfig(retry_user_errors=True)) is f.Decision.RETRY
    assert decide(kind=f.SYSTEM) is f.Decision.RETRY  # deaths are retried either way


@pytest.mark.parametrize("kind,error_type", [(f.USER, "KeyError"), (f.USER, "UnavailableError"), (f.SYSTEM, ""),
                                             (f.PEER, "UnavailableError")])
def test_no_failure_after_the_last_epoch_reruns_training(kind, error_type):
    cfg = FailureConfig(retry_user_errors=True, max_failures=-1)
    v = f.decide(kind=kind, error_type=error_type, attempt=1, progressed=True, failures_so_far=0, cfg=cfg,
                 trained=True)
    assert v.decision is f.Decision.RAISE and "last epoch" in v.reason
    # A preemption notice is not the program's failure: saved, and resumed (nothing left to train).
    assert decide(kind=f.PREEMPTED, trained=True) is f.Decision.RETRY


def test_script_failures_are_worded_as_the_scripts():
    v = f.decide(kind=f.USER, error_type="exit 3", attempt=1, progressed=False, failures_so_far=0,
                 cfg=FailureConfig(), script=True)
    # A script's steps raytf sees only through Model.fit or raytf.report: none seen is not "before its first step"
    # (an orbit loop trains without either; raytf issue 55).
    assert v.decision is f.Decision.RAISE and v.reason.startswith(
        "the script exited 3 and raytf saw no step of it (it counts Model.fit's and raytf.report's)")
    for error_type, cfg in (("OSError", FailureConfig()), ("exit 3", FailureConfig(retry_user_errors=True))):
        v = f.decide(kind=f.USER, error_type=error_type, attempt=1, progressed=False, failures_so_far=0, cfg=cfg,
                     script=True)
        assert v.decision is f.Decision.RETRY, (error_type, v)
    v = f.decide(kind=f.USER, error_type="KeyError", attempt=1, progressed=True, failures_so_far=0,
                 cfg=FailureConfig(), script=True)
    assert v.reason.startswith("the script raised KeyError: KeyError is not a transient error")


def test_verdicts_explain_themselves():
    v = f.decide(kind=f.SYSTEM, error_type="", attempt=1, progressed=True, failures_so_far=3, cfg=FailureConfig())
    assert "failure.max_failures (3)" in v.reason


def test_root_cause_prefers_a_death_over_its_symptoms():
    assert f.root_cause([f.PEER, f.SYSTEM, f.USER]) == 1
    assert f.root_cause([f.PEER, f.USER]) == 1
    assert f.root_cause([f.PEER]) == 0


def test_stale_ranks():
    assert f.stale_ranks({0: 100.0, 1: 90.0, 2: 200.0}, now=105.0, timeout_s=10) == [1]
    assert f.stale_ranks({}, now=1e9, timeout_s=1) == []


def test_unreachable_nodes_are_those_tf_names_that_never_answered():
    lost = ("UnavailableError: Collective ops is aborted by: Error reported from /job:worker/task:1: The following "
            "tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1\nThe tasks have crashed.")
    nodes = {("worker", 0): "A", ("worker", 1): "B", ("ps", 0): "C"}
    # A host cut off the network: its task never answers, so its node is avoided next time.
    assert f.unreachable_nodes([lost], nodes, answered={"A"}) == {"B"}
    # A killed process: its actor's death was reported from its node, which is reachable.
    assert f.unreachable_nodes([lost], nodes, answered={"A", "B"}) == set()
    # Only what follows "stopped sending heartbeats" counts (the reporter itself is named before it).
    assert f.unreachable_nodes(["Error reported from /job:worker/task:1: boom"], nodes, answered=set()) == set()
    several = "unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1\n/job:ps/replica:0/task:0"
    assert f.unreachable_nodes([several, "ValueError: x"], nodes, answered=set()) == {"B", "C"}
    assert f.unreachable_nodes([several], {}, answered=set()) == set()  # tasks of another spec: nothing known
    # TF's trailer names the reporter after the list: not one of the unhealthy.
    trailer = lost + "\nAdditional GRPC error information from remote target /job:ps/replica:0/task:0:"
    assert f.unreachable_nodes([trailer], nodes, answered={"A"}) == {"B"}


def test_a_lost_coordination_leader_points_at_its_node():
    """Rank 0's host cut off: the others' heartbeats to TF's coordination service (on its leader) time out."""
    text = ("DeadlineExceededError: Collective ops is aborted by: Deadline Exceeded\nAdditional GRPC error "
            "information from remote target /job:worker/replica:0/task:0:\n"
            "RPC: /tensorflow.CoordinationService/Heartbeat")
    assert f.unreachable_nodes([text], {("worker", 0): "A", ("worker", 1): "B"}, answered={"B"}) == {"A"}
    assert f.unreachable_nodes([text], {("chief", 0): "C", ("worker", 0): "A"}, answered=set()) == {"C"}
    # Its process killed (host alive): its actor's death came from that node, which is reachable.
    assert f.unreachable_nodes([text], {("worker", 0): "A", ("worker", 1): "B"}, answered={"A", "B"}) == set()
    assert f.unreachable_nodes(["DeadlineExceededError: a collective timed out"], {("worker", 0): "A"}, set()) == set()
    refused = "UnavailableError: Connection refused\nRPC: /tensorflow.CoordinationService/Heartbeat"
    assert f.unreachable_nodes([refused], {("worker", 0): "A"}, set()) == set()  # a live host, its process gone


def test_head_contact_is_lost_only_after_a_silence_of_lost_after_s():
    c = f.HeadContact(lost_after_s=30)
    assert c.observe(True, 0) is f.Contact.UP
    assert c.observe(False, 10) is f.Contact.SILENT
    assert c.observe(False, 39.9) is f.Contact.SILENT  # silent since 10
    assert c.observe(True, 40) is f.Contact.UP  # an answer starts the count again
    assert c.observe(False, 50) is f.Contact.SILENT
    assert c.observe(False, 80) is f.Contact.LOST
    assert c.observe(True, 81) is f.Contact.LOST  # final: the driver has given the run up


def test_the_head_is_given_up_at_half_rays_own_limit():
    assert f.head_lost_after({}) == 30
    assert f.head_lost_after({f.RAY_GCS_TIMEOUT_ENV: "120"}) == 60
    assert f.head_lost_after({f.RAY_GCS_TIMEOUT_ENV: "4"}) == 5  # probes need a few rounds
    assert f.head_lost_after({f.RAY_GCS_TIMEOUT_ENV: "soon"}) == 30


def test_head_watch_calls_on_lost_once_after_the_silence():
    import threading

    from raytf._driver.headwatch import HeadWatch

    answers = iter([True, False, True] + [False] * 1000)  # up, silent, up again, then silent for good
    lost: list[str] = []
    called = threading.Event()

    def on_lost(why: str) -> None:
        lost.append(why)
        called.set()

    watch = HeadWatch("198.18.0.2:6379", on_lost, lost_after_s=0.05, probe_s=0.005,
                      probe=lambda address: next(answers)).start()
    try:
        assert called.wait(10)
        watch._thread.join(10)
        assert not watch._thread.is_alive() and lost == ["it has not answered for 0.05s"]
    finally:
        watch.stop()


def test_known_errors_get_a_hint_that_says_what_to_change():
    tail = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
            "RuntimeError: Collective ops must be configured at program startup"]
    assert "before it built tf.distribute.MultiWorkerMirroredStrategy()" in f.hint("\n".join(tail))
    assert f.hint("KeyError: 'val_accuracy'") is None
    # The Model Garden resumed on its chief alone (raytf issue 55): the collectives' tensors differ between ranks.
    mismatch = ("tensorflow.python.framework.errors_impl.InternalError: Collective instance 182 expected type 1 and "
                "data_type 1 but got type 1 and data_type 9 [Op:CollectiveReduceV2]")
    assert "every rank must restore the same checkpoint" in f.hint(mismatch)
