"""The program reaches every host (raytf issue 32), on hosts that share no files (tests/hosts.py `private_fs`): each
host has its own /tmp and Ray directory, the user's project (a training module, a helper module it imports, an
unmodified tf.distribute script, a config) is on the head alone, one directory is shared (the storage), and raytf is
installed on every host. Function mode, `train.module` and `train.script`, each launched plainly (raytf ships the
launch directory) and through `ray job submit --working-dir .`, and a script at a path every node has (an image's,
nothing shipped), train on both worker hosts, each task from its own host's copy, with their checkpoints on the
shared directory; a host without the program, or without a package it imports, is refused in one line, and so is a
run directory on the driver's host alone."""

import ast
import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests import hosts

# CI's second step (-m slow), as every host-bed test. One bed for the module (~40 s to start); each case launches
# the plain run and the `ray job submit` one at once (and script mode a third, from a path every node has: an image),
# runs of two 1-CPU workers each, which the bed's 3+3 CPUs hold together.
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

RUN_S = 360  # one launch, at most (a loaded machine imports TensorFlow slowly)

USERTRAIN = '''
"""The user's training function."""
import os

import tensorflow as tf

import userhelper


def train(ctx):
    here = os.path.dirname(os.path.abspath(__file__))
    print("SHIPPED", here, sorted(os.listdir(here)), flush=True)
    with ctx.strategy.scope():
        model = userhelper.model()
    ctx.restore(model=model, optimizer=model.optimizer)
    model.fit(userhelper.dataset(ctx.global_batch_size), epochs=ctx.epochs, initial_epoch=ctx.initial_epoch,
              steps_per_epoch=ctx.steps_per_epoch, callbacks=ctx.keras_callbacks(), verbose=0)
'''

USERHELPER = '''
"""The project's own helper module, imported by the training module and the script."""
import numpy as np
import tensorflow as tf


def model():
    m = tf.keras.Sequential([tf.keras.layers.Input(shape=(4,)), tf.keras.layers.Dense(2)])
    m.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def dataset(batch_size):
    rng = np.random.default_rng(0)
    x, y = rng.random((64, 4), dtype=np.float32), rng.integers(0, 2, 64)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch_size)
'''

# A multi-worker script as written for launching by hand (TF_CONFIG read by the strategy), nothing of raytf in it.
SCRIPT = '''
import argparse
import os

import tensorflow as tf

import userhelper

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--model-dir", default="/tmp/model")
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
here = os.path.dirname(os.path.abspath(__file__))
print("SHIPPED", here, sorted(os.listdir(here)), flush=True)
with strategy.scope():
    model = userhelper.model()
model.fit(userhelper.dataset(8 * strategy.num_replicas_in_sync), epochs=args.epochs, steps_per_epoch=args.steps,
          callbacks=[tf.keras.callbacks.ModelCheckpoint(os.path.join(args.model_dir, "ckpt-{epoch}"),
                                                        save_weights_only=True)], verbose=0)
'''

# A module that imports a package only the head has (on its PYTHONPATH, outside the project).
NEEDS_HEADONLY = '''
import headonlypkg


def train(ctx):
    pass
'''


def conf(storage: str) -> str:
    return textwrap.dedent(f"""
        cluster:
          strategy: multi_worker_mirrored
          num_workers: 2
          worker: {{cpus: 1}}
          placement_strategy: STRICT_SPREAD
          placement_timeout_s: 90
          standby: 0
        checkpoint:
          export_model: false
        train:
          entrypoint: usertrain:train
          epochs: 1
          steps_per_epoch: 2
          batch_size: 8
        storage:
          path: {storage}
        """)


@pytest.fixture(scope="module")
def bed():
    yield from hosts.bed_for_tests([0, 3, 3], private_fs=True)


@pytest.fixture(scope="module")
def project(bed) -> Path:
    """The user's project, on the head only (with what is never shipped: a virtual environment, what .gitignore
    names)."""
    p = Path(bed.head_only) / "proj"
    p.mkdir()
    for name, text in {"usertrain.py": USERTRAIN, "userhelper.py": USERHELPER, "mwms_script.py": SCRIPT,
                       "needs_headonly.py": NEEDS_HEADONLY, "conf.yaml": conf(f"{bed.shared}/runs"),
                       ".gitignore": "ignored/\n"}.items():
        (p / name).write_text(text)
    (p / "ignored").mkdir()
    (p / "ignored" / "big.bin").write_bytes(b"\0" * 1024)
    (p / "env311").mkdir()
    (p / "env311" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    pkg = Path(bed.head_only) / "site" / "headonlypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    image = Path(bed.shared) / "image"  # at the same path on every node, as a node image has it
    image.mkdir()
    for name in ("mwms_script.py", "userhelper.py"):
        (image / name).write_text((p / name).read_text())
    return p


SCRIPT_ARGS = 'train.args=[--epochs,"1",--steps,"2",--model-dir,"{checkpoint_dir}"]'
MODES = {
    "function": [],
    "module": ["train.entrypoint=null", "train.module=mwms_script", SCRIPT_ARGS],
    "script": ["train.entrypoint=null", "train.script=mwms_script.py", SCRIPT_ARGS],
}


def _launch(bed, project: Path, run: str, overrides: list[str], *, submit: bool, env: dict | None = None):
    """`python -m raytf.launch conf.yaml` from the project's directory on the head: joining the cluster (--address),
    or as the entrypoint of `ray job submit --working-dir .` (the job's driver: on the head, in its copy)."""
    launch = [sys.executable, "-m", "raytf.launch", "conf.yaml", "--quiet", f"run.name={run}", *overrides]
    argv = ([sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address", "http://127.0.0.1:8265",
             "--working-dir", ".", "--", *launch] if submit else [*launch, f"--address={bed.address}"])
    return bed.popen(bed.head, argv, cwd=str(project), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                     env=bed.env(**(env or {})))


def _finish(proc) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, _ = proc.communicate(timeout=90)
        raise AssertionError(f"not done within {RUN_S}s:\n{out[-4000:]}") from None
    return proc.returncode, out


def _trained_on_both_workers(bed, run: str, code: int, out: str, *, shipped_by_raytf: bool,
                             image: str | None = None) -> None:
    """Succeeded, on both worker hosts, a checkpoint committed on the shared directory; each task ran its own host's
    copy of the program (or the `image` directory's, the same path everywhere), without what is never shipped."""
    assert code == 0, out[-4000:]
    run_dir = Path(bed.shared) / "runs" / run
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "succeeded", out[-4000:]
    workers = {t["rank"]: t["host"] for t in result["tasks"]}
    assert sorted(workers.values()) == sorted(h.address for h in bed.hosts[1:])  # both worker hosts
    assert list(run_dir.glob("checkpoints/*/_COMMITTED.json")), "no committed checkpoint on the shared directory"
    for rank, address in workers.items():
        log = (run_dir / "logs" / f"worker{rank}-attempt1.log").read_text()
        here, listing = re.search(r"SHIPPED (\S+) (\[.*\])", log).groups()
        if image is not None:
            assert here == image, here
            continue
        # Each host's own copy, unpacked under its own Ray directory; what is never shipped is not there.
        assert here.startswith(bed.host_of(address).temp_dir + "/"), (here, address)
        shipped = set(ast.literal_eval(listing))
        assert {"usertrain.py", "userhelper.py", "mwms_script.py", "conf.yaml"} <= shipped, shipped
        if shipped_by_raytf:  # (what `ray job submit` packs is Ray's and the user's business: .gitignore alone)
            assert not shipped & {"ignored", "env311"}, shipped
        assert "ignored" not in shipped, shipped
    print(f"{run}: first step {result['first_step_s']}s after launch, {result['duration_s']}s in all")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_program_reaches_both_worker_hosts(bed, project, mode):
    started = time.monotonic()
    launches = {"plain": _launch(bed, project, f"plain-{mode}", MODES[mode], submit=False),
                "job": _launch(bed, project, f"job-{mode}", MODES[mode], submit=True)}
    image = f"{bed.shared}/image"
    if mode == "script":  # the third way: nothing shipped, the script at a path every node has (an image's)
        launches["image"] = _launch(bed, project, "image-script", [*MODES[mode], f"train.script={image}/mwms_script.py",
                                                                   "ray.ship_code=off"], submit=False)
    runs = {how: _finish(proc) for how, proc in launches.items()}
    print(f"{mode}: {len(runs)} launches done in {time.monotonic() - started:.0f}s")
    for how, (code, out) in runs.items():
        _trained_on_both_workers(bed, f"{how}-{mode}", code, out, shipped_by_raytf=how == "plain",
                                 image=image if how == "image" else None)
        assert "Traceback" not in out, out[-4000:]


def test_a_host_without_the_program_is_refused_in_one_line(bed, project):
    started = time.monotonic()
    code, out = _finish(_launch(bed, project, "blind", ["ray.ship_code=off"], submit=False))
    print(f"refused in {time.monotonic() - started:.0f}s")
    assert code == 2, out[-4000:]
    errors = [line for line in out.splitlines() if line.startswith("raytf: ")]
    assert len(errors) == 1, out[-4000:]
    print(errors[0])
    w0, w1 = sorted(h.address for h in bed.hosts[1:])
    assert "userhelper" not in errors[0]  # (without the program, what it imports says nothing more)
    assert re.search(rf"{re.escape(w0)} \(worker \d\) and {re.escape(w1)} \(worker \d\) cannot import 'usertrain' "
                     r"\(train.entrypoint 'usertrain:train'\)", errors[0]), errors[0]
    assert "ray.ship_code=auto" in errors[0] and "Traceback" not in out
    result = json.loads((Path(bed.shared) / "runs" / "blind" / "result.json").read_text())
    assert result["status"] == "failed" and [a["status"] for a in result["attempts"]] == ["failed"]
    assert not list((Path(bed.shared) / "runs" / "blind").glob("checkpoints/*"))
    # Shipped, but a package it imports is on the head alone (its PYTHONPATH): named with the hosts, in one line.
    code, out = _finish(_launch(bed, project, "headonly", ["train.entrypoint=needs_headonly:train"], submit=False,
                                env={"PYTHONPATH": f"{bed.head_only}/site"}))
    assert code == 2, out[-4000:]
    errors = [line for line in out.splitlines() if line.startswith("raytf: ")]
    print(errors)
    assert len(errors) == 1 and "have no module 'headonlypkg' (imported by needs_headonly.py)" in errors[0], out
    assert w0 in errors[0] and w1 in errors[0] and "install headonlypkg on every node" in errors[0]


def test_storage_on_the_drivers_host_only_is_refused_before_training(bed, project):
    """A run directory on the driver's host alone (the head's `head_only` directory, as a local path is on separate
    machines): refused before any training, in one line, with the shared-storage message. (On this module's bed: a
    bed of its own was ~13 s of CI's second step to start, for one launch.)"""
    storage = Path(bed.head_only) / "runs"
    code, out = _finish(_launch(bed, project, "local-only", [f"storage.path={storage}"], submit=False))
    assert code == 1, out[-4000:]
    errors = [line for line in out.splitlines() if line.startswith("raytf: ")]
    assert len(errors) == 1 and "is not visible from worker 0" in errors[0] and "use shared storage" in errors[0], out
    result = json.loads((storage / "local-only" / "result.json").read_text())
    assert result["status"] == "failed" and result["attempts"][0]["first_step_at"] is None
    assert result["error"]["message"] and "Traceback" not in out
    assert not (storage / "local-only" / "checkpoints").exists()
