"""Learning curves from a metrics table (pure pandas)."""

import pandas as pd

from raytf._core import figures


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
