"""examples/kuberay/rayjob.yaml (docs/cluster.md, "KubeRay"): valid YAML, a RayJob whose entrypoint is raytf's CLI
on a config that exists and loads, whose runtimeEnvYAML gives the job a working_dir Ray can fetch on every pod (so
raytf ships nothing more), and whose pods all mount the config's storage and fit its workers. Pure: the manifest is
read, nothing is applied."""

import shlex

import yaml

from raytf._core import shipping
from raytf.config import load_config
from tests.conftest import ROOT

MANIFEST = ROOT / "examples" / "kuberay" / "rayjob.yaml"


def _pods(spec: dict) -> list[dict]:
    cluster = spec["rayClusterSpec"]
    return [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]


def test_the_rayjob_runs_raytfs_cli_with_the_code_as_the_jobs_working_dir():
    doc = yaml.safe_load(MANIFEST.read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayJob")
    spec = doc["spec"]
    python, flag, module, conf = shlex.split(spec["entrypoint"])
    assert (python, flag, module) == ("python", "-m", "raytf.launch")
    cfg = load_config(ROOT / conf)  # the config it names, as it would load in the job's working_dir
    env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert isinstance(env, dict) and shipping.is_uri(env["working_dir"]) and env["working_dir"].endswith(".zip")
    # Under that job raytf ships nothing: the job has its working_dir.
    assert shipping.job_env(cfg.ray.runtime_env, env, embedded=False, ship=cfg.ray.ship_code, launch_dir="/w",
                            excludes=[]) == shipping.JobEnv({})
    # Every pod sees the storage at the same path; the workers fit the config's tasks, one per pod.
    for group in _pods(spec):
        container = group["template"]["spec"]["containers"][0]
        mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
        assert any(cfg.storage.path.startswith(m.rstrip("/") + "/") for m in mounts), (group, cfg.storage.path)
    workers = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert sum(g["replicas"] for g in workers) >= cfg.cluster.num_workers
    limits = [g["template"]["spec"]["containers"][0]["resources"]["limits"] for g in workers]
    assert all(limit["nvidia.com/gpu"] >= cfg.cluster.worker.gpus for limit in limits)
    assert spec["rayClusterSpec"]["authOptions"]["mode"] == "token"
    assert spec["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
