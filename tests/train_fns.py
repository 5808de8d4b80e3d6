"""Training functions for the integration tests (entrypoints like tests.train_fns:fail_on_rank1)."""

import raytf


def fail_on_rank1(ctx: raytf.TrainContext) -> None:
    if ctx.rank == 1:
        raise ValueError("rank 1 refuses to train")
    from examples.keras_cnn import train

    train(ctx)


def report_only(ctx: raytf.TrainContext) -> None:
    """No model: reports a metric per epoch, to exercise the event path alone."""
    for _ in ctx.epoch_range():
        for _ in range(ctx.steps_per_epoch or 1):
            ctx.step_end({"value": float(ctx.rank)})
        ctx.epoch_end({"value": float(ctx.rank), "replicas": ctx.num_replicas})


def fail_always(ctx: raytf.TrainContext) -> None:
    raise RuntimeError(f"{ctx.role} {ctx.rank} fails on purpose")
