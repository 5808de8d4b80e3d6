"""Script mode's pure parts: config rules, exit classification, the child's environment and arguments, the
reporter's counting and checkpoint syncs, the output reader, the TF_CONFIG guard."""

import io
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import raytf
from raytf._core import failure
from raytf._core.plan import TaskSpec, streamed
from raytf._task.lines import AbortNoise, Shown
from raytf._task.lines import display as _display
from raytf._task.script.host import child_env, expand_args
from raytf._task.script.reporter import ScriptReporter
from raytf._task.tee import TaskOutput
from raytf.config import StreamOutput
from raytf.errors import ConfigError
from tests.conftest import ROOT


def _cfg(*overrides):
    return raytf.load_config(ROOT / "conf/script.yaml", list(overrides))


@pytest.mark.parametrize("overrides, message", [
    (["train.entrypoint=examples.keras_cnn:train"], "train.entrypoint and train.script are both set"),
    (["train.script=", "train.args=[]"], "train.entrypoint is empty"),
    (["train.script=", "train.module=tests.scripts.resume_probe", "train.entrypoint=x:y"], "both set"),
    (["train.script=", "train.module=not a module"], "train.module ('not a module') must be a dotted"),
    (["train.script=", "train.entrypoint=examples.keras_cnn:train"], "train.args is set but"),
    (["cluster.evaluator.enabled=true"], "cluster.evaluator.enabled=true with train.script"),
    (["train.args=[--dir,{checkpoint_dir}]"], "train.args[1] ({'checkpoint_dir': None}) is not a string"),
    (["train.stream_output=some"], "train.stream_output"),
])
def test_script_config_errors_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as e:
        from raytf.config.rules import validate

        validate(_cfg(*overrides))
    assert message in str(e.value)


def test_script_config_loads_with_its_defaults():
    cfg = _cfg()
    assert cfg.train.script == "examples/mwms_script.py" and cfg.train.stream_output is StreamOutput.rank0
    assert "{checkpoint_dir}" in cfg.train.args


def test_keys_a_script_never_sees_are_named():
    from raytf.config.rules import ignored_by_scripts

    cfg = _cfg("checkpoint.every_epochs=2", "cluster.collective=ring", "train.epochs=5", "metrics.every_steps=3")
    assert ignored_by_scripts(cfg) == ["train.epochs=5", "checkpoint.every_epochs=2", "cluster.collective=ring"]
    assert ignored_by_scripts(_cfg()) == []
    assert ignored_by_scripts(raytf.load_config(ROOT / "conf/local.yaml", ["train.epochs=5"])) == []


def test_exit_classification():
    assert failure.exit_failure(3, ["worker 1: giving up"]) == ("user", "exit 3")
    assert failure.exit_failure(-9, ["anything"]) == ("system", "")
    tail = ["Traceback (most recent call last):", '  File "t.py", line 3',
            "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed"]
    assert failure.exit_failure(1, tail) == ("peer", "UnavailableError")
    assert failure.exit_failure(1, ["ModuleNotFoundError: No module named 'x'"]) == ("user", "ModuleNotFoundError")
    # The type the child reported wins over the stderr lines (a long TF message can push it out of them).
    assert failure.exit_failure(1, ["  | some long message"], raised="UnavailableError") == ("peer", "UnavailableError")
    assert failure.exit_failure(1, ["ValueError: x"], raised="SystemExit") == ("user", "ValueError")
    # A deterministic error in a script is not retried, like in a training function.
    verdict = failure.decide(kind="user", error_type="ModuleNotFoundError", attempt=2, progressed=True,
                             failures_so_far=0, cfg=raytf.Config().failure)
    assert verdict.decision is failure.Decision.RAISE


def test_args_placeholders_and_terminal_lines():
    values = {"checkpoint_dir": "/c", "log_dir": "/l", "rank": "1", "role": "worker", "index": "1", "attempt": "2",
              "run_dir": "s3://b/r"}
    assert expand_args(["--model_dir={checkpoint_dir}/m", 7, '{"a": 1}', "{other}", "{rank}-{attempt}", "{log_dir}"],
                       values) == ["--model_dir=/c/m", "7", '{"a": 1}', "{other}", "1-2", "/l"]
    assert _display(b"10/20 [===>...]\r20/20 [=====] - loss: 1\n") == "20/20 [=====] - loss: 1"
    assert _display(b"plain\r\n") == "plain"


def test_streamed_ranks():
    assert [streamed(StreamOutput.rank0, r) for r in (0, 1)] == [True, False]
    assert [streamed(StreamOutput.all, r) for r in (0, 1)] == [True, True]
    assert not streamed(StreamOutput.none, 0)


def test_child_env(tmp_path):
    cfg = _cfg("run.name=r1")
    spec = TaskSpec(role="worker", index=1, rank=1, cpus=1, gpus=0)
    tf_config = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 1}}
    env = child_env(base={"PYTHONPATH": "/theirs", "TF_CONFIG": "stale", "CUDA_VISIBLE_DEVICES": "1"},
                    tf_config=tf_config, spec=spec, cfg=cfg, run_uri="/runs/r1", attempt=2, is_chief=False,
                    num_workers=2, checkpoint_dir=str(tmp_path), resume_from=None, python_path=["/code"],
                    log_dir="/scratch/logs")
    assert json.loads(env["TF_CONFIG"]) == tf_config
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # the devices Ray gave the actor
    assert (env["RAYTF_ROLE"], env["RAYTF_RANK"], env["RAYTF_IS_CHIEF"], env["RAYTF_ATTEMPT"]) == ("worker", "1",
                                                                                                 "0", "2")
    assert env["RAYTF_CHECKPOINT_DIR"] == str(tmp_path) and env["RAYTF_RUN_DIR"] == "/runs/r1"
    assert env["RAYTF_LOG_DIR"] == "/scratch/logs"
    paths = env["PYTHONPATH"].split(os.pathsep)
    assert paths == ["/code", "/theirs", str(ROOT)]  # raytf's checkout last: it shadows nothing of theirs
    single = child_env(base={"TF_CONFIG": "stale"}, tf_config=None, spec=spec, cfg=cfg, run_uri="/r", attempt=1,
                       is_chief=True, num_workers=1, checkpoint_dir="/c", resume_from=None, python_path=[])
    assert "TF_CONFIG" not in single


def _read_messages(fd):
    os.set_blocking(fd, False)
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass
    return [json.loads(line) for line in data.splitlines()]


def test_script_reporter_cadence_and_checkpoint_sync(tmp_path):
    r, w = os.pipe()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    rep = ScriptReporter(w, every_steps=4, heartbeat_s=60, is_chief=True, checkpoint_dir=str(ckpt),
                         scratch=str(tmp_path))
    rep.fit_started(replicas=2, epochs=2, steps_per_epoch=8)
    rep.epoch_begin(0)
    for _ in range(8):
        rep.step_end({"loss": 1.0})
    (ckpt / "ckpt-1.index").write_text("one")
    rep.epoch_end({"loss": 0.5})
    rep.epoch_begin(1)
    for _ in range(8):
        rep.step_end({"loss": 0.4})
    rep.epoch_end({"loss": 0.3})  # nothing new written: no sync
    msgs = _read_messages(r)
    assert msgs[0] == {"kind": "fit", "replicas": 2, "epochs": 2, "steps_per_epoch": 8, "fit": 1, "base_epoch": 0,
                       "base_step": 0}
    assert [m["step"] for m in msgs if m["kind"] == "step"] == [1, 4, 8, 12, 16]
    assert [(m["epoch"], m["step"]) for m in msgs if m["kind"] == "epoch"] == [(1, 8), (2, 16)]
    syncs = [m for m in msgs if m["kind"] == "sync"]
    assert [(m["epoch"], m["step"]) for m in syncs] == [(1, 8)]
    assert (Path(syncs[0]["path"]) / "ckpt-1.index").read_text() == "one"  # a copy the script cannot change
    (ckpt / "final.keras").write_text("model")
    rep.close(ok=True)  # files written after the last epoch are synced at exit
    assert [m["kind"] for m in _read_messages(r)] == ["sync"]

    # Custom loops: raytf.report with explicit steps; other ranks never sync.
    other = ScriptReporter(w, every_steps=10, heartbeat_s=60, is_chief=False, checkpoint_dir=str(ckpt),
                           scratch=str(tmp_path))
    (ckpt / "more").write_text("x")
    other.report_explicit({"loss": 2.0}, step=None, epoch=None, kind="step", checkpoint=True)
    other.report_explicit({"loss": 1.0}, step=7, epoch=None, kind="step", checkpoint=False)  # every call a row
    other.report_explicit({"acc": 0.9}, step=None, epoch=1, kind="epoch", checkpoint=False)
    msgs = _read_messages(r)
    assert [(m["kind"], m["step"]) for m in msgs] == [("step", 1), ("step", 7), ("epoch", 7)]
    assert msgs[0]["metrics"]["loss"] == 2.0 and msgs[2]["epoch"] == 1 and msgs[2]["metrics"] == {"acc": 0.9}

    # A resumed attempt of a script that counts no step raytf sees (orbit): its count stays where it resumed (50),
    # so a CheckpointManager's save is named by the checkpoint's own number; once it counts, by its count.
    resumed = ScriptReporter(w, every_steps=10, heartbeat_s=60, is_chief=True, checkpoint_dir=str(ckpt),
                             scratch=str(tmp_path), step=50)
    (ckpt / "ckpt-70.index").write_text("70")
    assert resumed.sync(number=70)
    resumed.report_explicit({"loss": 1.0}, step=None, epoch=None, kind="step", checkpoint=False)  # step 51
    (ckpt / "ckpt-80.index").write_text("80")
    assert resumed.sync(number=80)
    assert [(m["kind"], m["step"]) for m in _read_messages(r)] == [("sync", 70), ("step", 51), ("sync", 51)]
    os.close(r)
    os.close(w)


def test_second_fit_counts_on(tmp_path):
    """A script that calls fit twice (pre-training, then fine-tuning): its epochs, steps and checkpoint names
    go on from the first fit, so the fine-tuned checkpoints are the newest, not pruned as old ones."""
    r, w = os.pipe()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    rep = ScriptReporter(w, every_steps=100, heartbeat_s=60, is_chief=True, checkpoint_dir=str(ckpt),
                         scratch=str(tmp_path))
    for phase, epochs in enumerate((2, 1)):
        rep.fit_started(replicas=1, epochs=epochs, steps_per_epoch=5)
        for epoch in range(epochs):
            rep.epoch_begin(epoch)
            for _ in range(5):
                rep.step_end({"loss": 1.0})
            (ckpt / "weights.h5").write_text(f"phase {phase} epoch {epoch}")
            rep.epoch_end({"loss": 0.5})
    # A script fitting one epoch at a time says where it is (initial_epoch): counted as Keras counts it.
    rep.fit_started(replicas=1, epochs=5, steps_per_epoch=5)
    rep.epoch_begin(3)
    for _ in range(5):
        rep.step_end({"loss": 1.0})
    rep.epoch_end({"loss": 0.4})
    msgs = _read_messages(r)
    assert [(m["epoch"], m["step"]) for m in msgs if m["kind"] == "epoch"] == [(1, 5), (2, 10), (3, 15), (4, 20)]
    assert [(m["epoch"], m["step"]) for m in msgs if m["kind"] == "sync"] == [(1, 5), (2, 10), (3, 15)]
    os.close(r)
    os.close(w)


def test_output_reader_passes_progress_bars_as_signs_of_life(tmp_path):
    """A progress bar redraws with carriage returns and ends its line only at epoch end: each chunk counts as
    activity (heartbeats), the log keeps the bytes, and a line shows its last state."""
    pushed = []
    out = TaskOutput(io.BytesIO(), lambda kind, p: pushed.append(p["lines"]), Shown(streamed=True))
    r, w = os.pipe()
    pipe = os.fdopen(r, "rb")
    reader = threading.Thread(target=out.read, args=(lambda: pipe.read1(65536), "err"))
    reader.start()
    os.write(w, b" 1/10 [>....]\r")
    deadline = time.monotonic() + 10
    while not out._active and time.monotonic() < deadline:
        reader.join(0.01)  # wait on the reader thread itself: it marks activity before it ever sees a newline
    assert out.take_active() and not out.take_active()
    out.flush()
    assert pushed == []  # no line ended yet
    os.write(w, b" 10/10 [=====] loss: 0.5\nValueError: bad\ntrailing without newline")
    os.close(w)
    reader.join(10)
    out.end(ok=False)
    assert pushed == [[["err", " 10/10 [=====] loss: 0.5"], ["err", "ValueError: bad"],
                       ["err", "trailing without newline"]]]
    assert list(out.stderr_tail)[-1] == "trailing without newline"
    assert out.log_file.getvalue().startswith(b" 1/10 [>....]\r 10/10")


def test_report_outside_raytf_is_a_no_op():
    raytf.report({"loss": 1.0}, step=3)  # a script run by hand calls it too
    with pytest.raises(ValueError, match="kind"):
        raytf.report({"loss": 1.0}, kind="eval")


def test_tf_config_guard_keeps_ours():
    code = ("import os, json\n"
            "os.environ['TF_CONFIG'] = 'ours'\n"
            "from raytf._task.script.child import _GuardedEnviron\n"
            "os.environ.__class__ = _GuardedEnviron\n"
            "os.environ['TF_CONFIG'] = json.dumps({'cluster': {}})\n"
            "os.environ.update({'TF_CONFIG': 'x', 'OTHER': 'y'})\n"
            "del os.environ['TF_CONFIG']\n"
            "print(os.environ['TF_CONFIG'], os.environ['OTHER'])\n"
            "os.environ.clear()\n"
            "print(sorted(os.environ))\n"
            "try:\n"
            "    os.environ.popitem()\n"
            "except KeyError:\n"
            "    print('only TF_CONFIG left')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.split("\n")[:3] == ["ours y", "['TF_CONFIG']", "only TF_CONFIG left"]
    assert "<string>:9 clears TF_CONFIG: ignored" in out.stderr
    assert "<string>:5 sets TF_CONFIG: ignored" in out.stderr
    assert "<string>:6 sets TF_CONFIG" in out.stderr and "<string>:7 deletes TF_CONFIG" in out.stderr


def test_tf_abort_noise_is_held_and_dropped_when_the_script_succeeds():
    abort = ("E0000 00:00:1795469339.751694     695 base_collective_executor.cc:252] BaseCollectiveExecutor::"
             "StartAbort UNAVAILABLE: Socket closed")
    more = ["Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling "
            "/tensorflow.WorkerService/RecvBuf:", ":UNKNOWN:Error received from peer  {grpc_message:\"Socket closed\"}"]
    noise = AbortNoise()
    assert noise.feed("out", "Epoch 2/2") == [["out", "Epoch 2/2"]]
    assert noise.feed("err", abort) == [] and all(noise.feed("err", m) == [] for m in more)
    assert noise.end(ok=True) == []  # a run that succeeded: shutdown order, not news
    noise.feed("err", abort)
    assert noise.end(ok=False) == [["err", abort]]  # a failure: everything, in order
    # The script prints on after it: not the end, so all of it is streamed after all.
    noise.feed("err", abort)
    assert noise.feed("out", "step 7 loss 0.3") == [["err", abort], ["out", "step 7 loss 0.3"]]
    assert noise.end(ok=True) == []


# -- a warm child's handoff (raytf/_task/script/spawn.py) -----------------------------------------------------------

def test_a_warm_childs_sys_path_becomes_a_cold_ones():
    """`python -m` started in /spawn with PYTHONPATH=/old:rel put /spawn, /old, /spawn/rel first; given its script,
    the child's path is what a start in /work with PYTHONPATH=/user:/old would have made: the rest kept in order."""
    from raytf._task.script.protocol import rebased_path

    started = ["/spawn", "/old", "/spawn/rel", "/usr/lib/python311.zip", "/usr/lib/python3.11", "/site"]
    assert rebased_path(started, was_cwd="/spawn", cwd="/work", was_pythonpath="/old:rel",
                        pythonpath="/user:/old") == ["/work", "/user", "/old", "/usr/lib/python311.zip",
                                                     "/usr/lib/python3.11", "/site"]
    # A relative entry is the new directory's; no PYTHONPATH before or after; an empty entry is no entry.
    assert rebased_path(["/spawn", "/lib"], was_cwd="/spawn", cwd="/work", was_pythonpath="",
                        pythonpath="src::/x") == ["/work", "/work/src", "/x", "/lib"]
    # An entry of the old PYTHONPATH goes wherever it stands, a second copy (a .pth file's) too: the new one lacks it.
    assert rebased_path(["/spawn", "/a", "/lib", "/a"], was_cwd="/spawn", cwd="/w", was_pythonpath="/a",
                        pythonpath="") == ["/w", "/lib"]


def test_a_handoff_travels_as_one_line():
    from raytf._task.script.protocol import ChildSpec, Handoff, WarmStart

    spec = ChildSpec(parent_pid=7, module=None, script="/s.py", args=["--a", "é\n"], threads=1,
                     gpu_memory_growth=False, every_steps=10, heartbeat_s=5.0, is_chief=True, checkpoint_dir="/c",
                     scratch="/x", events_fd=5, alive_fd=6)
    handoff = Handoff(spec=spec, env={"TF_CONFIG": '{"a": 1}', "X": "line\nbreak"}, cwd="/w")
    line = handoff.encode()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert Handoff.decode(line) == handoff
    start = WarmStart(parent_pid=1, control_fd=3, events_fd=4, alive_fd=5)
    os.environ.update(start.to_env())
    assert WarmStart.from_env() == start and "RAYTF_SCRIPT_WARM" not in os.environ



def _summary_host(tmp_path, emitted: list):
    """A chief's ScriptHost (no child: its summaries are written here) whose events go to `emitted`."""
    from raytf._task.script.host import ScriptHost

    host = ScriptHost(cfg=_cfg("metrics.max_names=3"), spec=TaskSpec(role="worker", index=0, rank=0, cpus=1, gpus=0),
                      run_dir=None, emit=lambda k, p: emitted.append((k, p)), attempt=1, is_chief=True,
                      scratch=str(tmp_path), log_file=io.BytesIO(), stream=False)
    host.restore(None)
    return host


def _write_scalars(folder: str, *points: tuple[str, float, int]) -> None:
    from tensorboardX import SummaryWriter

    with SummaryWriter(folder) as writer:  # (a file of its own each time, as a restarted program's writer)
        for tag, value, step in points:
            writer.add_scalar(tag, value, step)


def test_a_scripts_tf_summary_scalars_are_its_rows_until_it_reports_its_own(tmp_path):
    """A script that counts no step raytf sees (orbit, the Model Garden): its scalars under $RAYTF_CHECKPOINT_DIR and
    $RAYTF_LOG_DIR are its rows, a step's once a newer step is seen (or at its end), its heartbeats carry their step;
    names past metrics.max_names are left out, not the script's end. Once it reports a row or starts a fit itself,
    its own rows are its metrics: no more of its scalars (a TensorBoard callback's epoch_loss is at step = epoch)."""
    from raytf._core import events as ev
    from raytf._task.script import protocol

    emitted = []
    host = _summary_host(tmp_path, emitted)
    _write_scalars(os.path.join(host.checkpoint_dir, "train"), ("loss", 1.0, 10), ("lr", 0.125, 10), ("loss", 0.5, 20))
    host._summaries.relay(final=False)
    assert [(k, p.step, p.metrics) for k, p in emitted] == [(ev.STEP, 10, {"train/loss": 1.0, "train/lr": 0.125})]
    _write_scalars(host.log_dir, ("a", 1.0, 30), ("b", 2.0, 30))  # $RAYTF_LOG_DIR's, at its top: the tag alone
    host._summaries.relay(final=True)
    assert [(p.step, p.metrics) for _, p in emitted[1:]] == [(20, {"train/loss": 0.5}), (30, {"a": 1.0})]
    assert host.position == (0, 30)
    host._on_message(protocol.Relayed(ev.HEARTBEAT, ev.Beat(epoch=1, step=0)))  # the child counted nothing
    assert emitted[-1] == (ev.HEARTBEAT, ev.Beat(epoch=1, step=30)) and host.position == (0, 30)

    host._on_message(protocol.Relayed(ev.STEP, ev.Row(epoch=1, step=1, metrics={"a": 2.0})))  # its own row
    _write_scalars(host.log_dir, ("a", 0.5, 40), ("a", 0.25, 50))
    host._summaries.relay(final=True)
    assert [p.metrics for _, p in emitted[-1:]] == [{"a": 2.0}] and host.position == (0, 1)


def test_a_record_bigger_than_a_read_is_read_whole_and_the_file_read_past_it(tmp_path, monkeypatch):
    """An image summary's record can be megabytes, more than one read takes: read whole, the scalars after it too."""
    from raytf._task.script import summaries

    monkeypatch.setattr(summaries, "_READ_BYTES", 64)
    _write_scalars(str(tmp_path / "train"), ("loss", 1.0, 1), ("loss", 0.5, 2))
    (events,) = (tmp_path / "train").iterdir()
    big = events.read_bytes()
    # A record of 1000 bytes (an Event whose file_version is long, as large as an image's would be) first.
    from tensorboardX.proto import event_pb2

    data = event_pb2.Event(step=0, file_version="x" * 1000).SerializeToString()
    events.write_bytes(struct.pack("<QI", len(data), 0) + data + struct.pack("<I", 0) + big)
    reader = summaries.SummaryReader([str(tmp_path)])
    found = []
    for _ in range(10):  # (a read a poll: the file's records, 64 bytes or one whole record at a time)
        found += reader.read()
    assert found == [(1, {"train/loss": 1.0}), (2, {"train/loss": 0.5})]


def test_a_scripts_checkpoint_copy_holds_each_directorys_newest_checkpoint(tmp_path):
    """The chief's sync copies its checkpoint directory: a BackupAndRestore's nested state file comes with the
    checkpoint it names, the top's with its own, older checkpoints left out (raytf issue 71)."""
    from raytf._task.script import reporter

    src = tmp_path / "ckpt"
    for name, text in {"checkpoint": 'model_checkpoint_path: "ckpt-2"\n', "ckpt-2.index": "i",
                       "ckpt-2.data-00000-of-00001": "d", "ckpt-1.index": "old", "ckpt-1.data-00000-of-00001": "old",
                       "backup/chief/checkpoint": 'model_checkpoint_path: "ckpt-3"\n', "backup/chief/ckpt-3.index": "i",
                       "backup/chief/ckpt-3.data-00000-of-00001": "d"}.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    assert reporter._copy_whole(str(src), str(tmp_path / "copy")) is None
    got = sorted(str(p.relative_to(tmp_path / "copy")) for p in (tmp_path / "copy").rglob("*") if p.is_file())
    assert got == ["backup/chief/checkpoint", "backup/chief/ckpt-3.data-00000-of-00001", "backup/chief/ckpt-3.index",
                   "checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index"]
    (src / "backup/chief/ckpt-3.index").unlink()  # (a backup named, not there: the copy says so, and is made again)
    said = reporter._copy_whole(str(src), str(tmp_path / "copy2"))
    assert said == "backup/chief/: its checkpoint file names ckpt-3, but ckpt-3.index is not there"
