"""The standbys' decisions, pure (raytf issue 53): when an attempt asks for them (`refill_after_s`), whether a group's
tasks start in standby processes (`take`), and where released standbys' scratch is swept (`sweeps`). A run right after
another (a notebook's loop, a sweep's next trial) finds the standbys the last one asked for, ready or still importing
TensorFlow. It takes the ready ones, then those still importing: a task given to one of those starts the moment its
import is done (a standby answers its calls in order), which is never later than a new process would (Ray's worker
start, then the same import); a new process beside them would import TensorFlow on the same cores at once, and made
every second run of such a loop slower than with no standbys at all (9.6, 13.2, 4.5, 12.3 s). New processes start only
for the tasks no standby is there for."""

from __future__ import annotations

from dataclasses import dataclass

# A session that is its one run (a CLI command: it releases its standbys as it exits, on its embedded Ray or on a
# cluster it joined) has standbys that can serve nothing but a retry of this run, and their import takes CPU from its
# training on the nodes it trains on: asked for at the first step, the cold CLI's steps were 1.41x the hand launch's
# against 1.02x without them, its own share 1.37-2.55 s against -0.26-0.28 s (benchmarks/RESULTS.md, "A run's end,
# shortened"). There they are asked for once the attempt has trained this long, when their import is a small part of
# the run; a failure before that restarts in new processes (~3-4 s more of `recovery_s`). (A CLI joining a cluster
# asked at its first step until raytf issue 70, when standbys began to import TensorFlow themselves again: each run
# of CI's host beds imported it on every node for standbys it then released unused.)
ONE_RUN_REFILL_AFTER_S = 20.0


def refill_after_s(at_first_step_s: float, one_run: bool) -> float:
    """How long an attempt trains before it asks for standbys: `at_first_step_s` (the driver's, 0: at its first step)
    where the session outlives the run (a notebook, a sweep's trial), at least ONE_RUN_REFILL_AFTER_S where the
    session is this one run (`one_run`: a CLI command), whose standbys can serve only a retry of it."""
    return max(at_first_step_s, ONE_RUN_REFILL_AFTER_S) if one_run else at_first_step_s


@dataclass(frozen=True)
class Take:
    """Of `count` tasks on a node (one runtime_env): how many start in ready standbys, in standbys still importing
    TensorFlow (the task waits for the rest of that import), and in new processes."""

    ready: int
    warming: int
    fresh: int


def take(count: int, ready: int, warming: int) -> Take:
    """Use the ready standbys, then wait for those still importing, and start new processes for the rest only."""
    from_ready = min(count, ready)
    from_warming = min(count - from_ready, warming)
    return Take(from_ready, from_warming, count - from_ready - from_warming)


@dataclass(frozen=True)
class Released:
    """What a pool's release ended (StandbyPool.release): how many standbys, and the nodes they were on, each with the
    pids of those whose pid was known (a standby still importing has told none yet: a sweep there waits for the
    others only, and removes whatever has lost its owner). Their scratch directories are the caller's to sweep."""

    count: int
    pids_on: dict[str, tuple[int, ...]]


def sweeps(pids_on: dict[str, tuple[int, ...]], local_roots: dict[str, str]
           ) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """Where released standbys' scratch is swept: (scratch root -> pids, swept in the caller's own process: the nodes
    in `local_roots`, whose tasks shared the caller's place and reported that root; node -> pids, swept by a Ray task
    on the node, which needs a worker process started there first). Pure."""
    here: dict[str, tuple[int, ...]] = {}
    there: dict[str, tuple[int, ...]] = {}
    for node, pids in pids_on.items():
        root = local_roots.get(node)
        if root:
            here[root] = (*here.get(root, ()), *pids)
        else:
            there[node] = pids
    return here, there
