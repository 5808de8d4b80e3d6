"""How each of raytf's costs grows with the number of tasks or ranks (issue 38): the growth exponent of each
measured series (the slope of log cost against log N: 1 is linear, 2 quadratic) and a log-log figure of them all.

Used by `python -m benchmarks.scale --plot FILE`; pure but for the figure (matplotlib), so `tests/core` checks the
exponents without Ray.
"""

from __future__ import annotations

import math

# (key in a result row, label): what benchmarks.scale measures per size, in seconds or cores.
ORCHESTRATION = (("bare_up", "Ray: bare actors all answering (s)"), ("addressed", "raytf: all addressed (s)"),
                 ("down", "raytf: teardown (s)"), ("driver_cpu_s", "raytf: driver CPU (s)"))
INTAKE = (("driver_cpu", "driver loop (cores)"), ("bus_cpu", "event bus (cores)"),
          ("intake_p99", "lag to driver p99 (s)"), ("end_s", "run's end: compaction + curves (s)"),
          ("show_s", "`runs show` of the run (s)"))
TRAINING = (("hand_first_step_s", "hand-launched: launch to first step (s)"),
            ("raytf_first_step_s", "raytf: launch to first step (s)"), ("hand_step_ms", "hand-launched: step (ms)"),
            ("raytf_step_ms", "raytf: step (ms)"))
# Faster than linear, by more than the noise of a 2-core machine allows us to tell (a series of 3 sizes
# measured once each): the part is named in the report.
SUPERLINEAR = 1.25


def exponent(xs: list[float], ys: list[float]) -> float | None:
    """The least-squares slope of log(y) on log(x); None with fewer than two usable points (y > 0)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2 or len({p[0] for p in pts}) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def exponents(rows: list[dict], size: str, series: tuple[tuple[str, str], ...]) -> list[tuple[str, float | None]]:
    """(label, growth exponent) of each series over the rows (one per size, `size` their N)."""
    out = []
    for key, label in series:
        have = [r for r in rows if r.get(key) is not None]
        out.append((label, exponent([float(r[size]) for r in have], [float(r[key]) for r in have])))
    return out


def _parts(orch: list[dict], intake: list[dict], training: list[dict]):
    return ((orch, "tasks", ORCHESTRATION, "orchestration"), (intake, "ranks", INTAKE, "the driver's intake"),
            (training, "workers", TRAINING, "real training (every worker on one machine)"))


def report(orch: list[dict], intake: list[dict], training: list[dict] = ()) -> list[str]:
    """Markdown lines: each series' growth exponent, and which grow faster than linearly. (A series with a size
    it lacks, hand-launched training past the sizes it ran at, fits the sizes it has.)"""
    lines = ["| part | N | growth exponent (1 = linear) |", "|---|---|---|"]
    faster = []
    for rows, noun, series, _ in _parts(orch, intake, list(training)):
        rows = list(rows)
        for label, k in exponents(rows, noun, series) if len(rows) >= 2 else []:
            lines.append(f"| {label} | {noun} | {'-' if k is None else f'{k:.2f}'} |")
            if k is not None and k > SUPERLINEAR:
                faster.append(f"{label} ({k:.2f})")
    if len(lines) == 2:
        return ["(one size of each part: no growth to fit)"]
    lines.append("")
    lines.append(f"faster than linear (exponent > {SUPERLINEAR:.2f}): {', '.join(faster) or 'none'}")
    return lines


def figure(orch: list[dict], intake: list[dict], training: list[dict] = ()):
    """Log-log panels, one per part measured: orchestration cost against tasks, intake cost against ranks, real
    training against workers, each with a linear guide."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = [p for p in _parts(orch, intake, list(training)) if p[0] or p[1] != "workers"]
    fig, axes = plt.subplots(1, len(parts), figsize=(6 * len(parts), 4.8))
    for ax, (rows, size, series, title) in zip(axes, parts):
        xs = [float(r[size]) for r in rows]
        for key, label in series:
            pts = [(x, float(r[key])) for x, r in zip(xs, rows) if r.get(key) is not None and float(r[key]) > 0]
            if pts:
                k = exponent([p[0] for p in pts], [p[1] for p in pts])
                ax.plot(*zip(*pts), marker="o", label=label + ("" if k is None else f", slope {k:.2f}"))
        if len(xs) >= 2:  # linear growth through the first point of the largest series, for the eye
            top = max((float(r[key]) for r in rows[:1] for key, _ in series if r.get(key) is not None), default=0)
            if top > 0:
                ax.plot([xs[0], xs[-1]], [top, top * xs[-1] / xs[0]], ls=":", color="grey", label="linear")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(size)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
