"""Cluster spec and TF_CONFIG derivation (pure)."""


import pytest

from raytf._core.plan import make_plan
from raytf._core.topology import TaskAddress, cluster_spec, is_chief, tf_config
from raytf.config import load_config


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_workers_spec_and_tf_config(n):
    addrs = [TaskAddress("worker", i, f"10.0.0.{i + 1}", 20000 + i) for i in reversed(range(n))]
    spec = cluster_spec(addrs)
    assert spec == {"worker": [f"10.0.0.{i + 1}:{20000 + i}" for i in range(n)]}
    for i in range(n):
        cfg = tf_config(spec, "worker", i)
        assert cfg == {"cluster": spec, "task": {"type": "worker", "index": i}}
        assert is_chief(spec, "worker", i) == (i == 0)


def test_roles_ordered_and_evaluator_left_out():
    addrs = [TaskAddress("ps", 0, "h", 3), TaskAddress("worker", 1, "h", 2), TaskAddress("chief", 0, "h", 1),
             TaskAddress("worker", 0, "h", 4), TaskAddress("evaluator", 0, "h", 5)]
    spec = cluster_spec(addrs)
    assert list(spec) == ["chief", "worker", "ps"]
    assert spec == {"chief": ["h:1"], "worker": ["h:4", "h:2"], "ps": ["h:3"]}
    assert tf_config(spec, "evaluator", 0)["task"] == {"type": "evaluator", "index": 0}
    assert is_chief(spec, "chief", 0) and not is_chief(spec, "worker", 0)


def test_ipv6_hosts_are_bracketed():
    assert cluster_spec([TaskAddress("worker", 0, "::1", 5)]) == {"worker": ["[::1]:5"]}


@pytest.mark.parametrize(("addrs", "match"), [
    ([TaskAddress("worker", 0, "h", 1), TaskAddress("worker", 2, "h", 2)], "not 0..1"),
    ([TaskAddress("worker", 0, "h", 1), TaskAddress("worker", 0, "h", 2)], "two addresses"),
    ([TaskAddress("worker", 0, "h", 1), TaskAddress("worker", 1, "h", 1)], "both claim"),
    ([TaskAddress("worker", 0, "h", 0)], "not a valid TCP port"),
    ([TaskAddress("chief", 0, "h", 1), TaskAddress("chief", 1, "h", 2)], "at most one chief"),
])
def test_inconsistent_addresses_rejected(addrs, match):
    with pytest.raises(ValueError, match=match):
        cluster_spec(addrs)


def test_tf_config_rejects_unknown_task():
    spec = {"worker": ["h:1"]}
    with pytest.raises(ValueError):
        tf_config(spec, "worker", 1)
    with pytest.raises(ValueError):
        tf_config(spec, "ps", 0)


def test_plan_ranks_and_bundles():
    cfg = load_config({"train": {"entrypoint": "m:f"}},
                      ["cluster.num_workers=3", "cluster.worker.cpus=2", "cluster.worker.gpus=1",
                       "cluster.worker.memory_gb=1", "cluster.worker.custom.tpu=1",
                       "cluster.placement_strategy=STRICT_SPREAD"])
    plan = make_plan(cfg)
    assert [(t.role, t.index, t.rank) for t in plan.tasks] == [("worker", i, i) for i in range(3)]
    assert plan.bundles == [{"CPU": 2.0, "GPU": 1.0, "memory": 1024**3, "tpu": 1.0}] * 3
    assert plan.placement_strategy == "STRICT_SPREAD"
    assert plan.tasks[0].threads == 2


def _ps_cfg(*extra):
    return load_config({"train": {"entrypoint": "m:f"}},
                       ["cluster.strategy=parameter_server", "cluster.num_ps=2", "cluster.num_workers=3",
                        "cluster.chief.cpus=2", "cluster.ps.cpus=0.5", "cluster.ps.memory_gb=2", *extra])


def test_ps_plan_roles_ranks_and_resources():
    plan = make_plan(_ps_cfg("cluster.evaluator.enabled=true", "train.eval_entrypoint=m:ev",
                             "cluster.evaluator.gpus=1"))
    assert [(t.role, t.index, t.rank) for t in plan.tasks] == [
        ("chief", 0, 0), ("worker", 0, 1), ("worker", 1, 2), ("worker", 2, 3), ("ps", 0, 4), ("ps", 1, 5),
        ("evaluator", 0, 6)]
    assert plan.bundles[0] == {"CPU": 2.0}
    assert plan.bundles[4] == {"CPU": 0.5, "memory": 2 * 1024**3}
    assert plan.bundles[6] == {"CPU": 1.0, "GPU": 1.0}


def test_ps_tf_configs_from_plan():
    plan = make_plan(_ps_cfg("cluster.evaluator.enabled=true", "train.eval_entrypoint=m:ev"))
    addrs = [TaskAddress(t.role, t.index, "10.1.0.1", 30000 + t.rank) for t in plan.tasks]
    spec = cluster_spec(addrs)
    assert spec == {"chief": ["10.1.0.1:30000"],
                    "worker": ["10.1.0.1:30001", "10.1.0.1:30002", "10.1.0.1:30003"],
                    "ps": ["10.1.0.1:30004", "10.1.0.1:30005"]}
    for t in plan.tasks:
        conf = tf_config(spec, t.role, t.index)
        assert conf["task"] == {"type": t.role, "index": t.index}
        assert "evaluator" not in conf["cluster"]
    assert [is_chief(spec, t.role, t.index) for t in plan.tasks] == [True] + [False] * 6


def test_mwms_plan_has_no_chief_or_ps():
    plan = make_plan(load_config({"train": {"entrypoint": "m:f"}}, ["cluster.num_workers=2"]))
    assert {t.role for t in plan.tasks} == {"worker"}


def test_task_env_sets_keras_and_openmp_before_tf_and_the_users_env_wins():
    from raytf._core.plan import task_runtime_env

    cfg = _ps_cfg("ray.runtime_env.env_vars.LOG_LEVEL=debug")
    chief, ps = make_plan(cfg).tasks[0], make_plan(cfg).tasks[-1]
    env = task_runtime_env(cfg, chief)["env_vars"]
    assert env["TF_USE_LEGACY_KERAS"] == "1" and env["LOG_LEVEL"] == "debug"
    assert env["OMP_NUM_THREADS"] == "2" and env["GRPC_FAIL_FAST"] == "use_caller"
    assert task_runtime_env(cfg, ps)["env_vars"]["OMP_NUM_THREADS"] == "1"  # 0.5 CPU: still one thread
    mine = _ps_cfg("cluster.threads=3", "ray.runtime_env.env_vars.OMP_NUM_THREADS='8'")
    assert task_runtime_env(mine, chief)["env_vars"]["OMP_NUM_THREADS"] == "8"
    assert task_runtime_env(_ps_cfg("cluster.threads=3"), ps)["env_vars"]["OMP_NUM_THREADS"] == "3"
    assert "env_vars" not in cfg.ray.runtime_env or "OMP_NUM_THREADS" not in cfg.ray.runtime_env["env_vars"]
    # Numbers and booleans from the command line or YAML reach Ray as strings (Ray refuses anything else).
    typed = task_runtime_env(_ps_cfg("ray.runtime_env.env_vars.N=4", "ray.runtime_env.env_vars.DEBUG=true"), ps)
    assert (typed["env_vars"]["N"], typed["env_vars"]["DEBUG"]) == ("4", "true")


def test_raytfs_own_variables_move_into_the_process_only_when_that_empties_the_runtime_env():
    """plan.actor_env: a task actor without a runtime_env of its own can take a worker Ray pre-started (issue 38);
    anything of the user's keeps the whole runtime_env where Ray sets it, at the process's start."""
    from raytf._core.plan import IN_PROCESS_ENV, actor_env, task_runtime_env

    cfg = _ps_cfg()
    chief = make_plan(cfg).tasks[0]
    full = task_runtime_env(cfg, chief)
    option, env = actor_env(full)
    assert option == {} and env == full["env_vars"] and set(env) <= IN_PROCESS_ENV
    assert env["TF_USE_LEGACY_KERAS"] == "1" and env["OMP_NUM_THREADS"] == "2"
    users = task_runtime_env(_ps_cfg("ray.runtime_env.env_vars.LD_LIBRARY_PATH=/opt/cuda/lib"), chief)
    assert actor_env(users) == (users, {})  # (a library path must be there when the process starts)
    threads = task_runtime_env(_ps_cfg("ray.runtime_env.env_vars.OMP_NUM_THREADS='8'"), chief)
    assert actor_env(threads) == ({}, threads["env_vars"])  # one of raytf's own, set by the user: still in-process
    package = task_runtime_env(_ps_cfg("ray.runtime_env.pip=[requests]"), chief)
    assert actor_env(package) == (package, {})
