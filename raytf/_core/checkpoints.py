"""Pure checkpoint bookkeeping: names, the commit rule, "latest committed" selection and pruning."""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# Written last, after every file of a checkpoint is in place: a checkpoint directory without it
# is a partial write (the writer died mid-upload) and is never selected for resume.
COMMIT_MARKER = "_COMMITTED.json"
# The commit marker's record of every file of the checkpoint: {relative path: {"bytes": n, "sha256": hex}}.
# Resume verifies it (CheckpointStore.verify): a file changed, missing or added after the commit is refused.
MANIFEST_KEY = "files"
# tf.train.Checkpoint file prefix inside a checkpoint directory.
TF_PREFIX = "ckpt"

# ckpt-nNNNNNNNN-eEEEEEE-sSSSSSSSSSS: the Nth checkpoint committed in the run's lineage, after E epochs and S
# steps as the program counted them. The lineage number orders checkpoints, not (epoch, step): a program's
# second Model.fit counts epochs from 0 again, a retried script restarts its count, and the newest checkpoint
# must still be the one resumed from and the one pruning keeps. Names without it (ckpt-eE-sS, before raytf
# 0.3) are older than any with it, and order among themselves by (epoch, step).
_NAME = re.compile(r"^ckpt-(?:n(\d{8})-)?e(\d{6})-s(\d{10})$")
# A replacement for a committed checkpoint of the same name is uploaded and committed here first; only then
# does the old copy go and this one take its name. Found by listing in the meantime (a writer that died there).
STAGING_SUFFIX = ".next"


@functools.total_ordering
@dataclass(frozen=True)
class CheckpointEntry:
    """A checkpoint directory under <run>/checkpoints/. Orders by lineage number, then (epoch, step)."""

    epoch: int
    step: int
    name: str
    committed: bool = True
    stored_as: str = field(default="", compare=False)  # the directory, when not `name` (a staged replacement)
    seq: int = 0  # its place in the run's lineage (0: a name from before lineage numbers)

    @property
    def dir(self) -> str:
        """Its directory under <run>/checkpoints/."""
        return self.stored_as or self.name

    def _key(self) -> tuple:
        return (self.seq, self.epoch, self.step, self.name)

    def __lt__(self, other: CheckpointEntry) -> bool:
        return self._key() < other._key()


def checkpoint_name(epoch: int, step: int, seq: int = 0) -> str:
    """Directory name for the `seq`th checkpoint of the lineage, the state after `epoch` completed epochs and
    `step` global steps (seq 0: the name without a lineage number)."""
    if epoch < 0 or step < 0 or seq < 0:
        raise ValueError(f"epoch ({epoch}), step ({step}) and seq ({seq}) must not be negative")
    lineage = f"n{seq:08d}-" if seq else ""
    return f"ckpt-{lineage}e{epoch:06d}-s{step:010d}"


def parse_name(name: str) -> tuple[int, int] | None:
    """(epoch, step) of a checkpoint's name, None for other names."""
    parsed = parse_full(name)
    return parsed[1:] if parsed else None


def parse_full(name: str) -> tuple[int, int, int] | None:
    """(seq, epoch, step) of a checkpoint's name (seq 0 when it has no lineage number), None for other names."""
    m = _NAME.match(name)
    return (int(m.group(1) or 0), int(m.group(2)), int(m.group(3))) if m else None


def next_seq(dirs: Iterable[str]) -> int:
    """The lineage number of the next checkpoint: one past every checkpoint directory's, committed or not (a
    writer that died mid-upload left a number that must not be reused)."""
    seqs = [p[0] for d in dirs if (p := parse_full(d.removesuffix(STAGING_SUFFIX)))]
    return max(seqs, default=0) + 1


def entries_from_listing(dirs: Iterable[str], committed: Iterable[str]) -> list[CheckpointEntry]:
    """Entries for the checkpoint-named directories in `dirs`; `committed` names those with a marker. A committed
    staged replacement (`<name>.next`) stands for `<name>` while `<name>` itself is not committed."""
    dirs, done = set(dirs), set(committed)
    staged = {}  # name -> its committed replacement, where the name's own directory is not committed
    for d in dirs:
        base = d.removesuffix(STAGING_SUFFIX)
        if d != base and parse_name(base) is not None and d in done and base not in done:
            staged[base] = d
    out = []
    for d in dirs:
        parsed = parse_full(d)
        if parsed is not None and d not in staged:
            out.append(CheckpointEntry(parsed[1], parsed[2], d, d in done, seq=parsed[0]))
    for base, d in staged.items():
        seq, epoch, step = parse_full(base)
        out.append(CheckpointEntry(epoch, step, base, True, stored_as=d, seq=seq))
    return sorted(out)


def stale_staging(dirs: Iterable[str], committed: Iterable[str]) -> list[str]:
    """Staged replacements no longer needed: their checkpoint's own directory is committed (the swap finished,
    or a later upload of that name did), or the staging was never committed (a writer that died before)."""
    done = set(committed)
    return sorted(d for d in dirs if d.endswith(STAGING_SUFFIX) and parse_name(d.removesuffix(STAGING_SUFFIX))
                  and (d.removesuffix(STAGING_SUFFIX) in done or d not in done))


def latest_committed(entries: Iterable[CheckpointEntry]) -> CheckpointEntry | None:
    committed = [e for e in entries if e.committed]
    return max(committed) if committed else None


def to_prune(entries: Iterable[CheckpointEntry], keep_last: int) -> list[CheckpointEntry]:
    """Checkpoints to delete: committed ones beyond the newest `keep_last` (0 keeps all), and
    partial ones older than the latest committed (a newer partial one may still be uploading).
    The latest committed checkpoint is never pruned."""
    entries = sorted(entries)
    committed = [e for e in entries if e.committed]
    if not committed:
        return []
    latest = committed[-1]
    doomed = [e for e in entries if not e.committed and e < latest]
    if keep_last > 0:
        doomed += committed[: max(0, len(committed) - keep_last)]
    return sorted(doomed)


def is_due(count: int, every: int) -> bool:
    """Whether a checkpoint is due after `count` epochs (or steps) with a period of `every` (0 = never)."""
    return every > 0 and count > 0 and count % every == 0


def crossed(before: int, after: int, every: int) -> bool:
    """Whether a counter moving from `before` to `after` passed a multiple of `every` (0 = never);
    Keras reports steps in groups of steps_per_execution, so exact multiples can be skipped."""
    return every > 0 and after // every > before // every


def manifest_problem(manifest: object, found: dict[str, int]) -> str | None:
    """What is wrong with a committed checkpoint's files against its marker's manifest, judged on names and sizes
    (`found`: relative path -> bytes, marker excluded); None when they match. Contents are checked separately
    (`digest_problem`), file by file, so a mismatch is found before reading everything."""
    if not isinstance(manifest, dict) or not manifest:
        return "its commit marker has no file manifest (written by an older raytf, or not by raytf)"
    if not all(isinstance(v, dict) and isinstance(v.get("bytes"), int) and isinstance(v.get("sha256"), str)
               for v in manifest.values()):
        return "its commit marker's file manifest is malformed"
    if missing := sorted(set(manifest) - set(found)):
        return f"{missing[0]} is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
    if extra := sorted(set(found) - set(manifest)):
        return f"{extra[0]} was added after the commit" + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "")
    for rel in sorted(manifest):
        if manifest[rel]["bytes"] != found[rel]:
            return f"{rel} has {found[rel]} bytes, the manifest says {manifest[rel]['bytes']}"
    return None


def digest_problem(manifest: dict, rel: str, sha256: str) -> str | None:
    """A file's content against the manifest's SHA-256."""
    want = manifest[rel]["sha256"]
    return None if sha256 == want else f"{rel}'s SHA-256 is {sha256[:12]}..., the manifest says {want[:12]}..."


# A tf.train.Checkpoint directory's state file (CheckpointManager, tf.train.latest_checkpoint): which checkpoint is
# the newest, `model_checkpoint_path: "ckpt-40"` on its first line (a text proto).
TF_STATE_FILE = "checkpoint"
_TF_STATE_NEWEST = re.compile(r'^model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', re.M)
_TF_SHARD = re.compile(r"\.data-(\d{5})-of-(\d{5})$")


_TF_FILE = re.compile(r"^(.+)\.(?:index|data-\d{5}-of-\d{5})$")
# TensorBoard's event files, which a program may write beside its checkpoints (the Model Garden's model_dir/train):
# no part of a checkpoint, and they grow all the time.
TF_EVENTS = "tfevents"


def tf_newest(state: str) -> str | None:
    """The checkpoint a state file's text names newest (its file prefix, relative), None if it names none."""
    m = _TF_STATE_NEWEST.search(state)
    if m is None:
        return None
    path = m.group(1).replace("\\", "")
    return path.rsplit("/", 1)[-1] if path.startswith("/") else path  # (absolute: written elsewhere, its name)


def tf_copy_set(names: Iterable[str], state: str) -> tuple[list[str], str]:
    """What a copy of a TF checkpoint directory takes (raytf issue 55: a program keeping its last 5 checkpoints had
    all 5 copied and uploaded at every save): of `names` (its files, relative), the checkpoint its state file
    names newest and every file that is no other checkpoint's and no TensorBoard event file; and the state file's
    text for the copy, naming that checkpoint alone (so that a resume finds what the copy holds)."""
    newest = tf_newest(state)
    keep = []
    for name in names:
        base = name.rsplit("/", 1)[-1]
        if TF_EVENTS in base or name == TF_STATE_FILE:
            continue
        m = _TF_FILE.match(name)
        if m is None or m.group(1) == newest:
            keep.append(name)
    text = f'model_checkpoint_path: "{newest}"\nall_model_checkpoint_paths: "{newest}"\n' if newest else state
    return sorted(keep), text


def tf_state_gaps(names: Iterable[str], state: str | None) -> str | None:
    """What a copy of a checkpoint directory lacks of the checkpoint its state file names newest, or None when it
    holds it whole (or has no state file to name one: a Keras `.keras` file, a script's own files). `names`: the
    copy's file names (relative); `state`: its state file's text, None without one. A TF checkpoint is its prefix's
    `.index` and every `.data-NNNNN-of-MMMMM` shard."""
    if state is None:
        return None
    prefix = tf_newest(state)  # (a path, absolute where it was written elsewhere: its name is the copy's)
    if prefix is None:
        return f"its {TF_STATE_FILE} file names no checkpoint"
    have = set(names)
    shards = [s for n in have if n.startswith(prefix + ".data-") and (s := _TF_SHARD.search(n))]
    expected = int(shards[0].group(2)) if shards else 1
    missing = [f"{prefix}.index"] if f"{prefix}.index" not in have else []
    missing += [f"{prefix}.data-{i:05d}-of-{expected:05d}" for i in range(expected)
                if f"{prefix}.data-{i:05d}-of-{expected:05d}" not in have]
    return f"its {TF_STATE_FILE} file names {prefix}, but {', '.join(missing)} is not there" if missing else None


def _owner(name: str, dirs: list[str]) -> str | None:
    """The nearest of `dirs` (directories holding a TF state file, relative; "" the top) that holds `name`."""
    return next((d for d in dirs if d == "" or name.startswith(d + "/")), None)


def tf_copy_plan(names: Iterable[str], states: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """What a copy of a program's checkpoint directory takes, with several TF checkpoint directories in it (a
    script's BackupAndRestore under it beside its ModelCheckpoint's or a CheckpointManager's: raytf issue 71, the
    nested backup's state file was copied without the checkpoint it names, and the retry could not restore). Of
    `names` (its files, relative), each directory's with a state file (`states`: its directory, relative, "" the top,
    -> the text, naming a checkpoint) as tf_copy_set takes it, the files of no such directory whole; and the state
    texts for the copy, by directory. Pure."""
    dirs = sorted(states, key=len, reverse=True)  # (the nearest first)
    owned: dict[str | None, list[str]] = {}
    for name in names:
        owner = _owner(name, dirs)
        if owner is not None and name == posixpath.join(owner, TF_STATE_FILE):
            continue  # (written anew, naming the newest alone)
        owned.setdefault(owner, []).append(name)
    keep, texts = list(owned.get(None, [])), {}
    for d in dirs:
        rel = [n[len(d) + 1:] if d else n for n in owned.get(d, [])]
        taken, texts[d] = tf_copy_set(rel, states[d])
        keep += [posixpath.join(d, n) if d else n for n in taken]
    return sorted(keep), texts


def tf_copy_gaps(names: Iterable[str], states: Mapping[str, str]) -> str | None:
    """What a copy made by tf_copy_plan lacks (`names`: the copy's files; `states`: its state texts by directory):
    the first directory whose state file names a checkpoint the copy does not hold whole, or None. Pure."""
    dirs = sorted(states, key=len, reverse=True)
    names = list(names)
    for d in sorted(states):
        mine = [n[len(d) + 1:] if d else n for n in names if _owner(n, dirs) == d]
        if (gap := tf_state_gaps(mine, states[d])) is not None:
            return f"{d}/: {gap}" if d else gap
    return None
