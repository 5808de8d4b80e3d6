"""Straggler detection (raytf/_core/stragglers.py), pure: fed step rows as the driver gets them."""

from raytf._core.stragglers import QUIET_WINDOWS, Stragglers


def _row(step_time, input_wait=0.0, compute=None, collective=0.0):
    compute = step_time - input_wait - collective if compute is None else compute
    return {"step_time_s": step_time, "input_wait_s": input_wait, "collective_s": collective, "compute_s": compute}


def _feed(s, rows_by_rank, attempt=1, start=10, hosts=None, log=None):
    changes = []
    for i in range(len(next(iter(rows_by_rank.values())))):
        for rank, rows in rows_by_rank.items():
            new = s.add(attempt=attempt, rank=rank, role="worker", host=(hosts or {}).get(rank, f"h{rank}"),
                        step=start + 10 * i, metrics=rows[i])
            changes += new
            if log is not None:
                log += [(f.rank, f.part, f.over) for f in new]
    return changes


def test_slow_input_is_named_with_input_as_the_cause():
    s = Stragglers(ratio=1.3, window=3)
    # Synchronous steps: both ranks take 0.2 s; rank 1 waits 0.12 s for input, rank 0 waits for rank 1 in the
    # all-reduce (collective), which is never blamed.
    fast = _row(0.2, input_wait=0.001, collective=0.12)
    slow = _row(0.2, input_wait=0.12, collective=0.001)
    changes = _feed(s, {0: [fast] * 5, 1: [slow] * 5})
    assert [(f.rank, f.part, f.host, f.over) for f in changes] == [(1, "input", "h1", False)]
    found = s.to_json()[0]
    assert found["part"] == "input" and found["rank"] == 1 and found["step"] == 30 and found["last_step"] == 50
    assert found["ratio"] is not None and found["ratio"] > 100
    assert changes[0].line(1.3) == ("straggler: worker 1 on h1 waits for its input 120.0 ms a step, the other ranks "
                                    "1.0 ms (120.0x, since step 30; metrics.straggler_ratio 1.3): every rank waits "
                                    "for it")


def test_slow_compute_is_named_with_compute_as_the_cause():
    s = Stragglers(ratio=1.3, window=3)
    fast = _row(0.3, input_wait=0.001, compute=0.1, collective=0.199)
    slow = _row(0.3, input_wait=0.001, compute=0.29, collective=0.009)
    changes = _feed(s, {0: [fast] * 4, 1: [slow] * 4, 2: [fast] * 4})
    assert [(f.rank, f.part) for f in changes] == [(1, "compute")]
    assert 2.8 < changes[0].ratio < 3.0


def test_it_must_stay_slow_over_the_window_and_be_more_than_noise():
    s = Stragglers(ratio=1.3, window=3)
    base = _row(0.2, input_wait=0.01)
    spike = _row(0.2, input_wait=0.05)
    # One slow row in three: not a straggler.
    assert _feed(s, {0: [base] * 6, 1: [base, spike, base, base, spike, base]}) == []
    # Every row slower, but by 2 ms of a 200 ms step (under 5 % of it): noise.
    s = Stragglers(ratio=1.3, window=3)
    assert _feed(s, {0: [_row(0.2, input_wait=0.001)] * 4, 1: [_row(0.2, input_wait=0.003)] * 4}) == []


def test_a_straggler_that_recovers_is_over_and_a_new_attempt_starts_afresh():
    s = Stragglers(ratio=1.3, window=2)
    # While rank 1 waits 0.1 s for input, rank 0 waits as long for rank 1 in the all-reduce; then both step in 0.1 s.
    slow, waiting = _row(0.2, input_wait=0.1), _row(0.2, input_wait=0.0, collective=0.1)
    fast = _row(0.1, input_wait=0.0)
    seen = []
    _feed(s, {0: [waiting] * 3 + [fast] * 3, 1: [slow, slow, slow, fast, fast, fast]}, log=seen)
    assert seen == [(1, "input", False), (1, "input", True)]
    assert s.to_json()[0]["last_step"] == 30
    # Attempt 2: only rank 0 reported so far, nobody to compare with; the old finding stays in the record.
    assert s.add(attempt=2, rank=0, role="worker", host="h0", step=5, metrics=slow) == []
    assert s.findings[0].over
    assert len(s.to_json()) == 1


def test_a_flapping_rank_is_one_finding_said_once_until_it_stays_in_line_a_while():
    """On a loaded machine a rank near the ratio flapped dozens of times a minute: each a new finding, a warning and
    an entry of result.json (raytf issue 33's soak). Now one finding, its turns counted."""
    s = Stragglers(ratio=1.3, window=2)
    # Rank 1's input wait comes and goes; step time and compute stay (parts that change make findings of their own).
    slow, waiting = _row(0.2, input_wait=0.1), _row(0.2, input_wait=0.0, collective=0.1)
    fast = _row(0.2, input_wait=0.0, collective=0.1)
    seen = []
    flaps = 6
    _feed(s, {0: ([waiting] * 2 + [fast] * 2) * flaps, 1: ([slow] * 2 + [fast] * 2) * flaps}, log=seen)
    assert seen == [(1, "input", False), (1, "input", True)]  # said once, not 12 times
    assert len(s.findings) == 1 and s.to_json()[0]["episodes"] == flaps
    # In line for QUIET_WINDOWS windows of rows, then slow again: news again, and so is its end.
    seen.clear()
    quiet = QUIET_WINDOWS * 2
    _feed(s, {0: [fast] * quiet + [waiting] * 2 + [fast] * 2, 1: [fast] * quiet + [slow] * 2 + [fast] * 2},
          start=1000, log=seen)
    assert seen == [(1, "input", False), (1, "input", True)]
    assert len(s.findings) == 1 and s.to_json()[0]["episodes"] == flaps + 1
    again = s.findings[0].line(1.3)  # said again: since when this time, not since it was first found
    back = 1000 + 10 * (quiet + 1)  # (its window full of slow rows again)
    assert f"again since step {back}, slow {flaps + 1} times since step 20;" in again, again


def test_one_rank_alone_or_parts_not_measured_find_nothing():
    s = Stragglers(ratio=1.3, window=2)
    assert _feed(s, {0: [_row(0.2, input_wait=0.1)] * 4}) == []
    s = Stragglers(ratio=1.3, window=2)
    only_step = [{"step_time_s": 0.2}] * 4
    assert _feed(s, {0: only_step, 1: only_step}) == []


def test_ranks_are_compared_within_their_role():
    s = Stragglers(ratio=1.3, window=2)
    changes = []
    for i in range(3):
        changes += s.add(attempt=1, rank=0, role="chief", host="h0", step=i, metrics=_row(0.5, input_wait=0.3))
        changes += s.add(attempt=1, rank=1, role="worker", host="h1", step=i, metrics=_row(0.2, input_wait=0.0))
    assert changes == []


def test_compute_is_not_judged_without_the_all_reduce_timed():
    """Without collective_s, the rank that waits for a slow one shows the wait as compute: never blamed for it."""
    s = Stragglers(ratio=1.3, window=2)
    waiting = {"step_time_s": 0.3, "input_wait_s": 0.0, "compute_s": 0.3}
    slow = {"step_time_s": 0.3, "input_wait_s": 0.2, "compute_s": 0.1}
    assert [(f.rank, f.part) for f in _feed(s, {0: [waiting] * 3, 1: [slow] * 3})] == [(1, "input")]


def test_the_others_median_matches_gathering_every_window():
    """The pooled median (sorted once, own window left out by position) against statistics.median of the other
    ranks' gathered windows, on random rows with ties, ranks joining late and a role of their own."""
    import random
    import statistics

    from raytf._core.stragglers import PARTS

    rng = random.Random(7)
    s = Stragglers(ratio=1.3, window=3)
    roles = {r: "ps" if r == 5 else "worker" for r in range(8)}
    for step in range(1, 12):
        for rank in range(8 if step > 2 else 4):
            metrics = {p: rng.choice([0.1, 0.2, 0.2, rng.random()]) for p in PARTS}
            s.add(attempt=1, rank=rank, role=roles[rank], host="h", step=step, metrics=metrics)
            for part in PARTS:
                others = [v for o, r in s._ranks.items() if o != rank and r.role == roles[rank]
                          and len(r.rows.get(part, ())) == 3 for v in r.rows[part]]
                expected = statistics.median(others) if others else None
                assert s._others_median(rank, part) == expected, (step, rank, part)


def test_512_ranks_cost_the_same_per_row_as_8(monkeypatch):
    """The watch is fed every rank's every step row: its work per row must not grow with the number of ranks (it
    once gathered every other rank's window and took their median for each row: quadratic per step). Counted as
    the values medians are taken of, not timed."""
    import statistics

    from raytf._core import stragglers as mod

    seen = 0
    median = statistics.median

    def counting(values):
        nonlocal seen
        values = list(values)
        seen += len(values)
        return median(values)

    monkeypatch.setattr(mod.statistics, "median", counting)

    def per_row(n: int) -> float:
        nonlocal seen
        seen = 0
        s = Stragglers(ratio=1.3, window=5)
        for step in range(10):
            for rank in range(n):
                slow = rank == 0  # one straggler: its finding's medians are taken on every row
                s.add(attempt=1, rank=rank, role="worker", host="h", step=step,
                      metrics=_row(0.2, 0.1 if slow else 0.01, collective=0.0 if slow else 0.09))
        assert [f.rank for f in s.findings] == [0]
        return seen / (10 * n)

    assert per_row(512) <= per_row(8)
