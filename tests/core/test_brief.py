"""Plans and messages that read at 512 ranks (raytf issue 54): lists said briefly, identical tasks as one row, the
cluster spec as its shape, the start-up table by node. Pure."""

from raytf._core import brief, preview
from raytf._core.plan import make_plan, task_table
from raytf._core.progress import misused_report
from raytf._core.tasks import TaskInfo
from raytf.config import load_config


def test_lists_are_said_briefly():
    assert brief.few(range(3)) == "0, 1, 2"
    assert brief.few(range(512)) == "0, 1, 2, 3, 4 and 507 more"
    assert brief.spans([5, 0, 1, 2, 3, 9, 10]) == "0-3, 5, 9, 10"
    assert brief.spans(range(512)) == "0-511"


def test_a_plan_of_512_workers_reads_in_a_screen():
    cfg = load_config("conf/local.yaml", ["cluster.num_workers=512", "cluster.worker.cpus=0.001"])
    p = preview.preview(cfg, preview.Cluster("an embedded Ray on this machine", ({"CPU": 2.0},), embedded=True))
    text = p.text()
    assert len(text.splitlines()) < 12 and len(text) < 2000, text
    assert "worker0-511 x512  0-511" in text and "{CPU: 0.001}" in text
    assert "TF cluster spec: worker: 512 x <host>:<port>" in text
    assert len(p.rows()) == 512 and len(p.cluster_spec["worker"]) == 512  # (the data stays whole)
    small = preview.preview(load_config("conf/local.yaml", []), p.cluster).text()
    assert "  worker0  0" in small and "  worker1  1" in small and "worker: [<worker0 host>:<port>, " in small


def test_the_start_up_table_groups_tasks_alike_by_node():
    plan = make_plan(load_config("conf/local.yaml", ["cluster.num_workers=512", "cluster.worker.cpus=0.001"]))
    infos = [TaskInfo("worker", r, r, f"10.0.0.{1 + r // 256}", 20000 + r % 256, f"node{r // 256}" + "0" * 20, 100 + r)
             for r in range(512)]
    table = task_table(infos, plan.tasks).splitlines()
    assert len(table) == 3, table
    assert table[1].split()[:5] == ["worker", "x256", "0-255", "node00000000", "10.0.0.1:20000-20255"]
    assert table[2].split()[2:4] == ["256-511", "node10000000"]
    two = task_table(infos[:2], plan.tasks).splitlines()
    assert len(two) == 3 and two[1].split()[:2] == ["worker", "0"]


def test_a_wrong_report_call_is_said_with_the_call_meant():
    line = misused_report((), ["epoch", "loss"])
    assert line.startswith("TrainContext.report(metrics=None, *, kind='step')") and "ctx.report({'loss': ...})" in line


def test_warnings_that_name_tasks_name_the_first_few_at_scale():
    from raytf._core import shipping, tf_ports
    from raytf._core.topology import TaskAddress
    from raytf.config import Strategy

    addresses = [TaskAddress("worker", i, f"198.18.0.{1 + i // 8}", 20000 + i) for i in range(512)]
    line = tf_ports.exposure_warning(addresses, strategy=Strategy.multi_worker_mirrored, port_range=None)
    assert "198.18.0.1:20000, 198.18.0.1:20001" in line and "and 507 more" in line and len(line) < 400
    missing = [shipping.Missing(shipping.PACKAGE, "pandas")]
    blind = [(f"198.18.0.{1 + r // 8}", "worker", r, missing) for r in range(512)]
    text = shipping.missing_line(blind, where="a cluster", key="train.entrypoint 'm:f'")
    assert "and 59 more" in text and "worker 0, worker 1, worker 2, worker 3, worker 4 and 3 more" in text
    assert len(text) < 1200, text
