"""A task's resident memory, for its step rows (`rss_gib`: what failure.max_task_rss_gb watches, _core/memory.py),
and its node's memory as the task's process sees it. No TensorFlow or Ray here: both modes' counters use it.

Linux only (/proc, cgroups: where Ray's tasks run); elsewhere nothing is sampled and no limit is derived."""

from __future__ import annotations

import os

from raytf._core import breakdown

_GIB = float(1 << 30)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# cgroup v2's limit of the process's own group, then v1's: a container's (a KubeRay pod's) memory, which is what
# Ray's memory monitor counts against, not the machine's.
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def rss_gib(statm: str = "/proc/self/statm") -> float | None:
    """This process's resident memory now (GiB; its second field of /proc/self/statm, in pages), or None."""
    try:
        with open(statm) as f:
            return int(f.read().split()[1]) * _PAGE / _GIB
    except (OSError, IndexError, ValueError):
        return None


def sample() -> dict[str, float]:
    """{rss_gib: GiB} for a step row (a `StepCounter` source; {} where it cannot be read). One small read of
    /proc at each row."""
    rss = rss_gib()
    return {} if rss is None else {breakdown.RSS: round(rss, 4)}


def node_gib(meminfo: str = "/proc/meminfo", limits: tuple[str, ...] = _CGROUP_LIMITS) -> float | None:
    """The memory this process's node offers it (GiB): the machine's (MemTotal), or its cgroup's limit when lower;
    None when neither can be read."""
    total = None
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    for path in limits:
        try:
            with open(path) as f:
                value = f.read().strip()
        except OSError:
            continue
        if value.isdigit():  # ("max": none; v1's "no limit" is a huge number, which min() leaves out)
            total = min(total, int(value)) if total is not None else int(value)
        break
    return None if total is None else round(total / _GIB, 3)
