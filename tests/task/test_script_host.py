"""Script mode's host in this process, with a real child process (which imports TensorFlow) and a storage
that fails."""

import io
import os

import pytest

import raytf
from raytf._core.plan import TaskSpec
from raytf._task.script import spawn
from raytf._task.script.host import ScriptHost, child_env
from tests.conftest import ROOT
from tests.processes import leftover_script_processes as _leftovers


def _cfg(*overrides):
    return raytf.load_config(ROOT / "conf/script.yaml", list(overrides))


def _chief(tmp_path, script: str, storage, emit=lambda k, p: None, *overrides: str) -> tuple[ScriptHost, dict]:
    """A chief's ScriptHost for `script` (run.name: its file's stem) uploading to `storage`, and the child's
    environment to run() it with; its scratch is tmp_path/scratch."""
    cfg = _cfg(f"run.name={os.path.basename(script).removesuffix('.py')}", f"train.script={script}", "train.args=[]",
               *overrides)
    spec = TaskSpec(role="worker", index=0, rank=0, cpus=1, gpus=0)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    host = ScriptHost(cfg=cfg, spec=spec, run_dir=storage, emit=emit, attempt=1, is_chief=True, scratch=str(scratch),
                      log_file=io.BytesIO(), stream=True)
    host.restore(None)
    env = child_env(base={**os.environ, "TF_USE_LEGACY_KERAS": "1"}, tf_config=None, spec=spec, cfg=cfg,
                    run_uri=storage.uri, attempt=1, is_chief=True, num_workers=1,
                    checkpoint_dir=host.checkpoint_dir, resume_from=None, python_path=[str(ROOT)])
    return host, env


class _FailingStorage:
    """A RunDir whose checkpoint uploads fail (as after storage.upload_retries against a dead endpoint)."""

    uri = "/nowhere/run"

    def __init__(self):
        self.tries = 0
        self.checkpoints = self  # (RunDir.checkpoints: next_seq, upload)

    def uri_of(self, *parts):
        return "/".join([self.uri, *parts])

    def next_seq(self):
        return 1

    def upload(self, local, epoch, step, meta, before_commit=None, seq=0):
        from raytf.errors import StorageError

        self.tries += 1
        raise StorageError(f"upload of step {step} failed: connection refused")


@pytest.mark.timeout(120)
def test_failed_checkpoint_upload_stops_the_script(tmp_path):
    """The upload fails past storage.unwritable_timeout_s (0 here: at once): the host stops the script (which would
    otherwise wait forever) and run() raises the storage error; no later checkpoint is uploaded after it."""
    from raytf._task.upload import StorageUnwritable

    storage = _FailingStorage()
    host, env = _chief(tmp_path, "tests/scripts/sync_forever.py", storage, lambda k, p: None,
                       "storage.unwritable_timeout_s=0")
    with pytest.raises(StorageUnwritable, match="upload of step 1 failed"):
        host.run(env)
    assert storage.tries == 1  # stopped at the first failure, the second sync not uploaded
    # (its exit status as the host read it: Popen's returncode is set only by the reap, on a thread of its own)
    assert spawn.wait_exit(host.proc) < 0  # killed, not exited
    assert _leftovers() == []


@pytest.mark.timeout(180)
def test_a_flood_of_output_stays_under_the_caps(tmp_path):
    """A 64 MiB line and 50k lines: the host holds and pushes at most its caps (a line is cut with a note, a flush
    carries a bounded number of bytes, the stderr tail is bounded by bytes), and the task's log has every byte."""
    import json
    import tracemalloc

    from raytf._core import events as ev
    from raytf._core import limits

    cfg = _cfg("run.name=flood", "train.script=tests/scripts/flood_output.py", "train.args=[]",
               "cluster.num_workers=1", "cluster.strategy=mirrored")
    spec = TaskSpec(role="worker", index=0, rank=0, cpus=1, gpus=0)
    events = []
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    log_path = tmp_path / "worker0.log"
    with open(log_path, "ab", buffering=0) as log_file:
        host = ScriptHost(cfg=cfg, spec=spec, run_dir=_FailingStorage(), emit=lambda k, p: events.append((k, p)),
                          attempt=1, is_chief=False, scratch=str(scratch), log_file=log_file, stream=True)
        host.restore(None)
        env = child_env(base={**os.environ, "TF_USE_LEGACY_KERAS": "1"}, tf_config=None, spec=spec, cfg=cfg,
                        run_uri="/nowhere/run", attempt=1, is_chief=False, num_workers=1,
                        checkpoint_dir=host.checkpoint_dir, resume_from=None, python_path=[str(ROOT)])
        tracemalloc.start()
        try:
            code, tail = host.run(env)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert code == 3
    assert peak < 24 * 1024 * 1024, peak  # the 64 MiB line was never held, nor 50k lines
    # The log on disk: every byte (and TensorFlow's start-up lines).
    logged = log_path.read_bytes()
    lines = set(logged.split(b"\n"))  # whole lines: stdout's and stderr's interleave by line
    del logged
    assert b"x" * (64 << 20) in lines and {f"line {i}".encode() for i in range(50_000)} <= lines
    assert {f"E{i:02d} ".encode() + b"e" * (64 << 10) for i in range(30)} <= lines
    del lines
    # Pushed: each flush within its caps (plus the one line saying what was not streamed).
    outputs = [p["lines"] for k, p in events if k == ev.OUTPUT]
    for lines in outputs:
        assert len(lines) <= limits.MAX_FLUSH_LINES + 1
        assert len(json.dumps(lines)) <= limits.MAX_FLUSH_BYTES + 64 * len(lines) + 200
    streamed = [text for lines in outputs for _, text in lines]
    (cut,) = [t for t in streamed if t.startswith("xxx")]
    assert cut == "x" * limits.MAX_LINE_BYTES + limits.cut_note(64 * 2**20 - limits.MAX_LINE_BYTES)
    assert "line 49999" in streamed or any("not streamed" in t for t in streamed)
    # The stderr tail (the error's message, result.json): bounded by bytes as well as lines.
    assert tail[-1] == "ValueError: flooded" and tail[-2].startswith("E29 eee") and "not shown" in tail[-2]
    assert len("\n".join(tail).encode()) <= limits.TAIL_BYTES and len(tail) <= limits.TAIL_LINES
    assert _leftovers() == []


class _RecordingStorage(_FailingStorage):
    """A RunDir that keeps, per checkpoint handed over, what the copy holds: the checkpoint its `checkpoint` state
    file names, and whether that checkpoint alone is there whole (its index and every data shard, no other
    checkpoint's files, a state file naming it alone)."""

    def __init__(self):
        super().__init__()
        self.uploads: list[tuple[int, str, bool]] = []

    def upload(self, local, epoch, step, meta, before_commit=None, seq=0):
        import re
        from pathlib import Path

        state = (Path(local) / "checkpoint").read_text()
        named = re.search(r'^model_checkpoint_path: "([^"]+)"', state, re.M).group(1)
        shards = list(Path(local).glob(f"{named}.data-*-of-*"))
        whole = (Path(local) / f"{named}.index").exists() and bool(shards) and len(shards) == int(
            shards[0].name.rsplit("-of-", 1)[1])
        others = [p.name for p in Path(local).iterdir() if p.name.endswith(".index") and p.name != f"{named}.index"]
        self.uploads.append((step, named, whole and not others and state.count("ckpt-") == 2))
        return self.uri_of("checkpoints", f"ckpt-{step}")

    def prune(self, keep_last):
        pass


@pytest.mark.timeout(180)
def test_async_checkpoint_manager_saves_are_copied_whole_and_named_by_their_number(tmp_path):
    """A CheckpointManager saving asynchronously, pruning to max_to_keep=2 (tests/scripts/async_saves.py, as the
    Model Garden saves): each copy handed over for upload holds the checkpoint its state file names, whole, and no
    other (the one save's files, not the manager's whole directory), and carries that checkpoint's number as its step
    (the script reports no step of its own). Its tf.summary scalars (in the checkpoint directory's train/, as the
    Model Garden writes them) are its metrics rows, one per step, named by their folder and tag."""
    from raytf._core import events as ev

    storage = _RecordingStorage()
    emitted = []
    host, env = _chief(tmp_path, "tests/scripts/async_saves.py", storage, lambda k, p: emitted.append((k, p)))
    host.run(env)
    assert storage.uploads, "no checkpoint handed over"
    assert [whole for _, _, whole in storage.uploads] == [True] * len(storage.uploads), storage.uploads
    assert [(step, named) for step, named, _ in storage.uploads] == [(n * 10, f"ckpt-{n * 10}") for n in range(1, 5)]
    rows = [(p.step, {k: round(v, 4) for k, v in p.metrics.items()}) for k, p in emitted if k == ev.STEP]
    assert rows == [(n * 10, {"train/training_loss": round(1.0 / n, 4), "train/learning_rate": 0.1})
                    for n in range(1, 5)]
    assert _leftovers() == []


@pytest.mark.timeout(120)
def test_a_checkpoint_that_cannot_be_copied_whole_is_raytfs_storage_error_not_the_scripts(tmp_path):
    """A state file naming a checkpoint that is not there: copied COPY_TRIES times, never whole; the host stops the
    script and run() raises raytf's StorageError (retried as raytf's failure, not the script's); nothing uploaded."""
    from raytf.errors import StorageError

    storage = _RecordingStorage()
    host, env = _chief(tmp_path, "tests/scripts/names_a_missing_checkpoint.py", storage)
    with pytest.raises(StorageError, match=r"could not be copied whole for upload: its checkpoint file names ckpt-7, "
                                           r"but ckpt-7.index, ckpt-7.data-00000-of-00001 is not there"):
        host.run(env)
    assert storage.uploads == [] and spawn.wait_exit(host.proc) < 0
    assert list((tmp_path / "scratch").glob("snapshot-*")) == []  # (the copies that were not whole are gone)
    assert _leftovers() == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("stuck", [True, False], ids=["stuck", "none"])
def test_a_scripts_end_writes_its_open_files_and_leaves_past_a_stuck_teardown(tmp_path, stuck):
    """TensorFlow's race can hold a tf.data iterator's teardown for up to a minute after the script (raytf/_task/
    tfdata.py): the child leaves past it at once (script/leaving.py), after the script's exit handlers, with the
    script's exit status, without the interpreter's shutdown; waiting for it held a run's end 16-21 s
    (benchmarks/RESULTS.md). Either way, a file the script never closed has its last line, as with `python
    script.py` (runpy's globals are collected late in the shutdown: CPython's gh-62052 lost it)."""
    import time

    out = tmp_path / "out.txt"
    host, env = _chief(tmp_path, "tests/scripts/stuck_teardown.py", _FailingStorage())
    started = time.monotonic()
    code, tail = host.run({**env, "STUCK_OUT": str(out), "STUCK": "1" if stuck else "0"})
    took = time.monotonic() - started
    assert code == 3, tail  # the script's own status, through the exit that leaves past the teardown too
    assert took < 30, took  # (the wait it replaces: 65 s)
    assert out.read_text() == "the last line"
    assert "the script's exit handler ran" in tail
    assert ("the interpreter's shutdown ran" in tail) is not stuck, tail
    assert _leftovers() == []


@pytest.mark.timeout(120)
def test_a_scripts_child_in_a_process_group_of_its_own_ends_with_the_script(tmp_path):
    """A child the script put in a process group of its own (setpgid) is still of its session: the host's end kills
    every group of it (raytf issue 71: such children were left running)."""
    from raytf._storage import RunDir

    host, env = _chief(tmp_path, "tests/scripts/escaping_child.py", RunDir(str(tmp_path / "runs"), "escaping_child"))
    host.run(env)
    assert spawn.wait_exit(host.proc) == 0
    assert _leftovers() == []
