"""Learning curves from a metrics table (pure pandas)."""

import pandas as pd
import pytest

from raytf._driver import figures


def test_learning_curves_take_the_last_attempt_of_each_epoch():
    df = pd.DataFrame([
        dict(run="r", attempt=1, rank=0, role="worker", kind="epoch", epoch=1, step=5, time=0.0, loss=2.0),
        dict(run="r", attempt=1, rank=0, role="worker", kind="epoch", epoch=2, step=10, time=0.0, loss=9.0),
        dict(run="r", attempt=2, rank=0, role="worker", kind="epoch", epoch=2, step=10, time=0.0, loss=1.0),
        dict(run="r", attempt=2, rank=1, role="worker", kind="epoch", epoch=2, step=10, time=0.0, loss=3.0),
        dict(run="r", attempt=2, rank=5, role="evaluator", kind="eval", epoch=2, step=10, time=0.0, loss=1.5),
        dict(run="r", attempt=2, rank=0, role="worker", kind="step", epoch=2, step=7, time=0.0, loss=7.0),
    ])
    curves = figures.learning_curves(df)
    assert curves["loss"].tolist() == [2.0, 2.0]  # epoch 2: attempt 2's ranks averaged, attempt 1 dropped
    assert curves["eval_loss"].dropna().tolist() == [1.5]


def _rows(attempt, workers, steps, *, epoch_every=10, kind="step"):
    """Rank 0's step rows (and an epoch row at every epoch's end) of one attempt of `workers` workers."""
    out = []
    for s in steps:
        out.append(dict(run="r", attempt=attempt, rank=0, role="worker", kind=kind, epoch=(s - 1) // epoch_every + 1,
                        step=s, time=float(s), fit=1, num_workers=workers, loss=1.0 / s))
        if s % epoch_every == 0:
            out.append(out[-1] | dict(kind="epoch", epoch=s // epoch_every))
    return out


def test_size_changes_are_placed_at_each_resized_attempts_first_step():
    """3 workers to step 25 (committed at 20), then 2 from 21 (a shrink: it redoes 21..25), a failure at the same
    size that trained nothing, then 3 again from step 36 (a grow at the agreed step 35)."""
    df = pd.DataFrame(_rows(1, 3, range(1, 26)) + _rows(2, 2, range(21, 36)) + _rows(4, 3, range(36, 51)))
    df = pd.concat([df, pd.DataFrame([dict(run="r", attempt=5, rank=9, role="evaluator", kind="eval", epoch=5,
                                           step=50, time=99.0, fit=None, num_workers=1, loss=0.1)])])
    changes = figures.size_changes(df)
    assert [w for _, w in changes] == [2, 3]
    assert changes[0][0] == pytest.approx(2.1) and changes[1][0] == pytest.approx(3.6)  # step 21, step 36
    assert figures.size_changes(df[df["attempt"] != 2]) == []  # one size throughout: nothing to mark
    assert figures.size_changes(df.drop(columns=["num_workers"])) == []  # a run recorded before the column
    old = df.assign(num_workers=df["num_workers"].where(df["attempt"] > 1))  # launch 1 without it
    assert [w for _, w in figures.size_changes(old)] == [3]


def test_size_changes_without_step_counts_fall_at_the_epochs_start():
    df = pd.DataFrame([dict(run="r", attempt=a, rank=0, role="worker", kind="epoch", epoch=e, step=0, time=float(e),
                            fit=None, num_workers=w, loss=1.0) for a, w, e in ((1, 3, 1), (1, 3, 2), (2, 2, 3))])
    assert figures.size_changes(df) == [(2.0, 2)]


def test_the_figure_marks_each_size_change_in_every_panel():
    df = pd.DataFrame(_rows(1, 3, range(1, 21)) + _rows(2, 2, range(21, 41)))
    df["accuracy"] = 0.5
    assert list(figures.learning_curves(df).columns) == ["loss", "accuracy"]  # num_workers is no metric
    fig = figures.figure(figures.learning_curves(df), resizes=figures.size_changes(df))
    try:
        for ax in fig.axes:
            assert [t.get_text().strip() for t in ax.texts] == ["2 workers"]
            assert [line.get_xdata()[0] for line in ax.lines if line.get_linestyle() == ":"] == [pytest.approx(2.1)]
        plain = figures.figure(figures.learning_curves(df))
        assert not any(ax.texts for ax in plain.axes)
    finally:
        import matplotlib.pyplot as plt

        plt.close("all")
    assert figures.png_bytes(figures.learning_curves(df), resizes=[(2.1, 2)]).startswith(b"\x89PNG")


def test_prefetch_imports_pyplot_in_the_background_once_and_not_in_a_notebook():
    """The curves' pyplot import starts as an attempt's training ends (figures.prefetch), so that the run's end finds
    it done; once, on the non-interactive backend, and not where a notebook's kernel owns the backend. A process of
    its own: this one may have pyplot imported already."""
    import subprocess
    import sys

    code = """
import sys
from raytf._driver import figures
assert "matplotlib.pyplot" not in sys.modules
figures.prefetch()
first = figures._prefetch
figures.prefetch()
assert figures._prefetch is first and first.daemon
first.join(60)
import matplotlib
print("matplotlib.pyplot" in sys.modules, matplotlib.get_backend())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["True", "Agg"], out.stderr[-2000:]
    notebook = subprocess.run([sys.executable, "-c", "import sys, types; sys.modules['ipykernel'] = types.ModuleType("
                               "'ipykernel'); from raytf._driver import figures; figures.prefetch(); "
                               "print(figures._prefetch, 'matplotlib.pyplot' in sys.modules)"],
                              capture_output=True, text=True, timeout=120)
    assert notebook.returncode == 0 and notebook.stdout.split() == ["None", "False"], notebook.stderr[-2000:]


def test_curves_drawn_while_the_background_import_still_runs_wait_for_it():
    """A run's end draws its curves while `prefetch`'s import may still run (a loaded machine: CI's rehearsal). Two
    threads importing matplotlib at once met a half-initialised module ("cannot import name 'NullFormatter' from
    partially initialized module 'matplotlib.ticker'"), which failed the run: drawing right after the prefetch began
    did so 12 times in 12 here. A process of its own: this one may have matplotlib imported already."""
    import subprocess
    import sys

    code = """
import pandas as pd
from raytf._driver import figures
figures.prefetch()
png = figures.png_bytes(pd.DataFrame({"loss": [1.0, 0.5, 0.3], "val_loss": [1.1, 0.7, 0.6]}, index=[1, 2, 3]))
print(png.startswith(b"\\x89PNG"), figures._prefetch.is_alive())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["True", "False"], out.stderr[-2000:]
