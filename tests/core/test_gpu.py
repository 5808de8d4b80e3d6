"""GPU use sampling (raytf._task.gpu) against a scripted NVML: the columns and values per device, how
CUDA_VISIBLE_DEVICES' entries map to NVML devices, failures that must not reach training, and silence without GPUs."""

import logging
import sys
from types import SimpleNamespace

import pytest

from raytf._core.progress import StepCounter
from raytf._task.gpu import GpuSampler, visible_devices

GIB = 1 << 30


class NVMLError(Exception):
    pass


class FakeNvml:
    """The part of pynvml the sampler uses. `devices`: NVML index -> (UUID, readings), each reading a
    (utilisation %, bytes used) pair or an exception to raise. Reading `t` is what NVML says now (a test moves
    `t` on between samples); the last one repeats."""

    NVMLError = NVMLError

    def __init__(self, devices, init_error=None):
        self.devices = devices
        self.init_error = init_error
        self.calls = []
        self.t = 0

    def nvmlInit(self):
        self.calls.append("init")
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, index):
        if index not in self.devices:
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for index, (u, _) in self.devices.items():
            if u == uuid:
                return index
        raise NVMLError("Not Found")

    def _reading(self, handle):
        readings = self.devices[handle][1]
        r = readings[min(self.t, len(readings) - 1)]
        if isinstance(r, Exception):
            raise r
        return r

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=int(self._reading(handle)[0]), memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        used = int(self._reading(handle)[1])
        return SimpleNamespace(used=used, total=16 * GIB, free=16 * GIB - used)


def _fake():
    return FakeNvml({
        0: ("GPU-aaaa", [(10, 1 * GIB), (20, 2 * GIB)]),
        1: ("GPU-bbbb", [(55, GIB // 2), (65, 3 * GIB)]),
        2: ("GPU-cccc", [(99, 8 * GIB)]),
    })


class _Log(list):
    def __call__(self, msg):
        self.append(msg)


@pytest.mark.parametrize(("value", "entries"), [
    ("0,1", ["0", "1"]),
    (" 2 , 0 ", ["2", "0"]),
    ("GPU-aaaa,GPU-bbbb", ["GPU-aaaa", "GPU-bbbb"]),
    ("0,2,-1,1", ["0", "2"]),  # CUDA hides everything from the first invalid entry on
    (None, []), ("", []), ("-1", []), ("NoDevFiles", []),
])
def test_visible_devices(value, entries):
    assert visible_devices(value) == entries


def test_two_devices_by_index_columns_and_values():
    # The task sees NVML devices 2 and 0, in that order: its device 0 is NVML's 2.
    nvml, log = _fake(), _Log()
    s = GpuSampler.for_task("2,0", nvml=nvml, log=log)
    assert s is not None and nvml.calls == ["init"]
    assert s.sample() == {"gpu0_util": 99.0, "gpu0_mem_gib": 8.0, "gpu1_util": 10.0, "gpu1_mem_gib": 1.0}
    nvml.t += 1
    assert s.sample() == {"gpu0_util": 99.0, "gpu0_mem_gib": 8.0, "gpu1_util": 20.0, "gpu1_mem_gib": 2.0}
    assert log == []


def test_devices_by_uuid():
    nvml = _fake()
    s = GpuSampler.for_task("GPU-bbbb,GPU-aaaa", nvml=nvml, log=_Log())
    assert s.sample() == {"gpu0_util": 55.0, "gpu0_mem_gib": 0.5, "gpu1_util": 10.0, "gpu1_mem_gib": 1.0}


def test_an_entry_nvml_does_not_know_is_named_and_the_rest_sampled():
    log = _Log()
    s = GpuSampler.for_task("GPU-zzzz,1", nvml=_fake(), log=log)
    # The task's device numbering stays CUDA's: the known device is still its device 1.
    assert s.sample() == {"gpu1_util": 55.0, "gpu1_mem_gib": 0.5}
    assert len(log) == 1 and "GPU-zzzz" in log[0] and "NVMLError" in log[0]


def test_no_device_nvml_knows_is_none_and_nvml_released():
    nvml, log = _fake(), _Log()
    assert GpuSampler.for_task("7", nvml=nvml, log=log) is None
    assert nvml.calls == ["init", "shutdown"] and len(log) == 1


def test_a_device_failing_mid_run_is_left_out_while_it_fails():
    nvml = FakeNvml({
        0: ("GPU-aaaa", [(10, GIB), (11, GIB), (12, GIB)]),
        1: ("GPU-bbbb", [(50, GIB), NVMLError("GPU is lost"), NVMLError("GPU is lost"), (70, GIB)]),
    })
    log = _Log()
    s = GpuSampler.for_task("0,1", nvml=nvml, log=log)
    assert s.sample() == {"gpu0_util": 10.0, "gpu0_mem_gib": 1.0, "gpu1_util": 50.0, "gpu1_mem_gib": 1.0}
    nvml.t += 1
    assert s.sample() == {"gpu0_util": 11.0, "gpu0_mem_gib": 1.0}
    nvml.t += 1
    assert s.sample() == {"gpu0_util": 12.0, "gpu0_mem_gib": 1.0}
    nvml.t += 1
    assert s.sample() == {"gpu0_util": 12.0, "gpu0_mem_gib": 1.0, "gpu1_util": 70.0, "gpu1_mem_gib": 1.0}
    assert len(log) == 1 and "device 1" in log[0] and "GPU is lost" in log[0]  # said once, not per row


class _NoPynvml:
    """A meta-path finder that fails any import of pynvml: the no-GPU path must not even try it."""

    def find_spec(self, name, path=None, target=None):
        if name == "pynvml":
            raise AssertionError("pynvml was imported on a task without GPUs")
        return None


@pytest.mark.parametrize("visible", [None, "", "-1", "NoDevFiles"])
def test_no_gpus_is_none_silently_without_importing_pynvml(visible, monkeypatch, capsys, caplog):
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_NoPynvml(), *sys.meta_path])
    caplog.set_level(logging.DEBUG)
    assert GpuSampler.for_task(visible) is None
    assert "pynvml" not in sys.modules
    assert capsys.readouterr() == ("", "")
    assert caplog.records == []


def test_gpus_without_pynvml_one_warning(monkeypatch, caplog, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    caplog.set_level(logging.DEBUG)
    assert GpuSampler.for_task("0") is None
    assert [(r.levelno, r.name) for r in caplog.records] == [(logging.WARNING, "raytf._task.gpu")]
    assert "GPU use is not sampled" in caplog.records[0].getMessage()
    assert "nvidia-ml-py" in caplog.records[0].getMessage()
    assert capsys.readouterr() == ("", "")


def test_nvml_init_failing_one_warning(caplog):
    nvml = FakeNvml({0: ("GPU-aaaa", [(1, 1)])}, init_error=NVMLError("Driver Not Loaded"))
    caplog.set_level(logging.DEBUG)
    assert GpuSampler.for_task("0", nvml=nvml) is None
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    msg = caplog.records[0].getMessage()
    assert "GPU use is not sampled" in msg and "Driver Not Loaded" in msg
    assert nvml.calls == ["init"]  # nothing initialised: nothing to shut down


def test_close_shuts_nvml_down_once():
    nvml = _fake()
    s = GpuSampler.for_task("0", nvml=nvml, log=_Log())
    s.close()
    s.close()  # the task's teardown may reach it twice; NVML's init count must drop by one only
    assert nvml.calls == ["init", "shutdown"]
    assert s.sample() == {}


def test_step_rows_carry_the_samples_epoch_rows_do_not():
    sent = []
    c = StepCounter(lambda kind, payload: sent.append((kind, payload)), every_steps=2, heartbeat_s=60)
    c.sources.append(GpuSampler.for_task("1", nvml=_fake(), log=_Log()).sample)
    c.step_end({"loss": 1.0})
    c.epoch_end({"loss": 0.5})
    (_, step), (_, epoch) = sent
    assert step["metrics"]["gpu0_util"] == 55.0 and step["metrics"]["gpu0_mem_gib"] == 0.5
    assert epoch["metrics"] == {"loss": 0.5}
