"""GPU use per device for a task's step rows, sampled through NVML (`pynvml`, the nvidia-ml-py package); a task
without GPUs samples nothing and says nothing about it. No TensorFlow or Ray here: both modes' counters use it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from raytf._core import breakdown

logger = logging.getLogger(__name__)

_GIB = float(1 << 30)


def visible_devices(value: str | None) -> list[str]:
    """CUDA_VISIBLE_DEVICES' entries in order (the task's device i, as CUDA and TF number them, is entry i):
    indices or UUIDs (`GPU-…`, `MIG-…`). Unset or empty (Ray's value for a task with no GPUs), "NoDevFiles" (read
    as none by Ray too) and "-1" mean none; like CUDA, the list ends at the first empty or negative entry."""
    out = []
    for entry in (value or "").split(","):
        entry = entry.strip()
        if not entry or entry == "NoDevFiles" or entry.startswith("-"):
            break
        out.append(entry)
    return out


class GpuSampler:
    """Samples, for each of the task's devices, NVML's utilisation (percent of its own last sample period in which
    a kernel ran) and the memory used (GiB). Built by `for_task`; `sample` is a `StepCounter` source."""

    def __init__(self, nvml: Any, handles: dict[int, Any], *, log: Callable[[str], None]) -> None:
        self._nvml = nvml
        self._handles = handles  # the task's device index -> NVML handle
        self._log = log
        self._failed: set[int] = set()  # devices whose failure was logged (once each)

    @classmethod
    def for_task(cls, visible: str | None, *, nvml: Any = None,
                 log: Callable[[str], None] = logger.warning) -> GpuSampler | None:
        """The sampler for the devices in `visible` (CUDA_VISIBLE_DEVICES), or None: silently when there are none
        (pynvml is not even imported), with one message through `log` when NVML cannot be used. `nvml`: the
        NVML module (tests inject one; default `pynvml`)."""
        devices = visible_devices(visible)
        if not devices:
            return None
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as e:
                log(f"GPU use is not sampled: pynvml (the nvidia-ml-py package) cannot be imported ({e})")
                return None
        try:
            nvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no usable driver here
            log(f"GPU use is not sampled: NVML did not start ({type(e).__name__}: {e})")
            return None
        handles, unknown = {}, []
        for i, entry in enumerate(devices):
            try:
                # Ray's GPU ids are NVML's indices (it counts the node's GPUs through NVML); a UUID names one device
                # whatever the order.
                handles[i] = (nvml.nvmlDeviceGetHandleByIndex(int(entry)) if entry.isdigit()
                              else nvml.nvmlDeviceGetHandleByUUID(entry))
            except Exception as e:
                unknown.append(f"{entry} ({type(e).__name__}: {e})")
        if unknown:
            log(f"GPU use is not sampled for CUDA_VISIBLE_DEVICES entries NVML does not know: {', '.join(unknown)}")
        sampler = cls(nvml, handles, log=log)
        if not handles:
            sampler.close()
            return None
        return sampler

    def sample(self) -> dict[str, float]:
        """{gpu<i>_util: percent, gpu<i>_mem_gib: GiB} for each device that answers now. Called on the training
        thread at each step row: two NVML calls a device, and a failing device is left out of this row, never
        raised into training."""
        row: dict[str, float] = {}
        for i, handle in self._handles.items():
            try:
                util = float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(handle).used / _GIB
            except Exception as e:  # a GPU lost mid-run (Xid), or a reading this device does not offer
                if i not in self._failed:
                    self._failed.add(i)
                    self._log(f"GPU use: device {i} gave no reading ({type(e).__name__}: {e}); left out of the "
                              "rows while it fails")
                continue
            row[breakdown.gpu_util(i)] = util
            row[breakdown.gpu_mem(i)] = mem
        return row

    def close(self) -> None:
        """Release NVML (once: nvmlShutdown counts down the process' nvmlInit calls, other users' included)."""
        nvml, self._nvml, self._handles = self._nvml, None, {}
        if nvml is None:
            return
        try:
            nvml.nvmlShutdown()
        except Exception as e:  # at the end of a task: nothing to do about it but say so
            logger.debug("nvmlShutdown: %s", e)
