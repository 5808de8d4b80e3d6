"""benchmarks/rounds.py: interleaved rounds, the medians of each side, differences taken round by round."""

import pytest

from benchmarks.rounds import interleaved, medians, paired


def test_rounds_alternate_the_order_and_differences_are_taken_within_a_round():
    order = []

    def one(contender, n):
        order.append((n, contender))
        # The machine drifts between rounds (+100 s a round) far more than the two sides differ (+2 s).
        base = 100.0 * n
        return {"contender": contender, "round": n, "up": base + (2.0 if contender == "raytf" else 0.0),
                "name": f"run-{n}", "ok": True}

    rows = interleaved(3, ["ray", "raytf"], one)
    assert order == [(0, "ray"), (0, "raytf"), (1, "raytf"), (1, "ray"), (2, "ray"), (2, "raytf")]
    assert paired(rows, "ray", "up", "raytf", "up") == [2.0, 2.0, 2.0]
    # The medians of the totals carry the drift; only the numbers are kept (not the round, a name or a flag).
    assert medians(rows, "raytf") == {"up": pytest.approx(102.0)}
    assert medians(rows, "ray") == {"up": pytest.approx(100.0)}


def test_a_round_one_side_did_not_finish_is_left_out_of_the_differences():
    rows = [{"contender": "ray", "round": 0, "up": 1.0}, {"contender": "raytf", "round": 0, "up": 4.0},
            {"contender": "ray", "round": 1, "up": 9.0}]
    assert paired(rows, "ray", "up", "raytf", "up") == [3.0]
