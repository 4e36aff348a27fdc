"""bench/lk_moe_masked.py's calls (#38): each masking form hands lk_moe the tensors it names, and the
analysis divides each cell by the same trial's baseline. No lk_moe, no timing."""

from __future__ import annotations

import numpy as np
import pytest

from bench import lk_moe_masked as masked

ROUTING = np.arange(36, dtype=np.int32).reshape(6, 6)  # row r routes to experts 6r..6r+5: all distinct
ONE, TWO, FOUR = masked.SCENARIOS


def test_the_scenarios_are_the_issues_batches() -> None:
    assert (ONE.rows, ONE.masked, ONE.real) == (3, (1, 2), [0])
    assert (TWO.rows, TWO.masked, TWO.real) == (6, (1, 2), [0, 3, 4, 5])
    assert (FOUR.rows, FOUR.masked, FOUR.real) == (12, (1, 2, 4, 5), [0, 3, 6, 7, 8, 9, 10, 11])
    assert all(scenario.rows == sum(map(len, scenario.requests)) for scenario in masked.SCENARIOS)


@pytest.mark.parametrize("form", [masked.BASELINE, masked.AGAIN])
def test_the_baseline_is_the_real_rows_alone(form: str) -> None:
    batch = masked.masked_batch(form, TWO, ROUTING)
    assert batch.rows == [0, 3, 4, 5] and batch.count == 4
    assert (batch.ids == ROUTING[[0, 3, 4, 5]]).all() and np.allclose(batch.weights, 1 / 6)
    assert masked.distinct(batch) == 24


@pytest.mark.parametrize("form", masked.MASKING)
@pytest.mark.parametrize("scenario", [ONE, TWO, FOUR])
def test_masking_leaves_the_real_rows_as_they_are(form: str, scenario: masked.Scenario) -> None:
    routing = np.arange(6 * scenario.rows, dtype=np.int32).reshape(scenario.rows, 6)
    batch = masked.masked_batch(form, scenario, routing)
    real = [batch.rows.index(r) for r in scenario.real]
    assert real == list(range(len(real))) or batch.rows == list(range(scenario.rows))
    assert (batch.ids[real] == routing[scenario.real]).all() and np.allclose(batch.weights[real], 1 / 6)
    assert batch.ids.dtype == np.int32 and batch.weights.dtype == np.float32


def test_each_form_marks_the_masked_rows_its_own_way() -> None:
    rows = [1, 2]
    ids_only = masked.masked_batch("ids -1", TWO, ROUTING)
    assert (ids_only.ids[rows] == -1).all() and np.allclose(ids_only.weights[rows], 1 / 6)
    assert (ids_only.count, masked.distinct(ids_only)) == (6, 24)
    weights_only = masked.masked_batch("weights 0", TWO, ROUTING)
    assert (weights_only.ids[rows] == ROUTING[rows]).all() and (weights_only.weights[rows] == 0).all()
    assert masked.distinct(weights_only) == 36  # their experts are still routed
    both = masked.masked_batch("ids -1, weights 0", TWO, ROUTING)
    assert (both.ids[rows] == -1).all() and (both.weights[rows] == 0).all()
    everything = masked.masked_batch("real n", TWO, ROUTING)
    assert (everything.ids == ROUTING).all() and masked.distinct(everything) == 36


def test_repeat_routes_masked_rows_to_their_requests_real_row_and_adds_no_expert() -> None:
    batch = masked.masked_batch("repeat, weights 0", TWO, ROUTING)
    assert (batch.ids[[1, 2]] == ROUTING[0]).all() and (batch.weights[[1, 2]] == 0).all()
    assert masked.distinct(batch) == masked.distinct(masked.masked_batch(masked.BASELINE, TWO, ROUTING))


def test_repeat_takes_each_requests_own_real_row() -> None:
    routing = np.arange(72, dtype=np.int32).reshape(12, 6)
    batch = masked.masked_batch("repeat, weights 0", FOUR, routing)
    assert (batch.ids[[1, 2]] == routing[0]).all() and (batch.ids[[4, 5]] == routing[3]).all()
    assert (batch.weights[[1, 2, 4, 5]] == 0).all() and masked.distinct(batch) == 48


def test_count_packs_the_real_rows_first_and_counts_them() -> None:
    batch = masked.masked_batch("count n-m", TWO, ROUTING)
    assert batch.rows == [0, 3, 4, 5, 1, 2] and batch.count == 4 and len(batch.ids) == 6
    assert (batch.ids[:4] == ROUTING[[0, 3, 4, 5]]).all()
    assert masked.distinct(batch) == 24  # rows past the count route nothing


def test_an_unknown_form_and_routing_of_another_size_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown form"):
        masked.masked_batch("ids -2", TWO, ROUTING)
    with pytest.raises(ValueError, match="routing for 6 rows"):
        masked.masked_batch("ids -1", ONE, ROUTING)


def test_cells_are_divided_by_the_same_trials_baseline() -> None:
    ms = {masked.BASELINE: [10.0, 20.0, 30.0], masked.AGAIN: [10.0, 20.0, 30.0], "ids -1": [20.0, 20.0, 90.0]}
    experts = {form: [6, 6, 6] for form in ms}
    base, again, ids = masked.summarize(ms, experts, list(ms))
    assert base.ratio == (1.0, 1.0, 1.0) and again.ratio == (1.0, 1.0, 1.0)
    assert ids.ratio[1] == 2.0 and ids.ms[1] == 20.0 and ids.excess_ms == 10.0  # paired: 2, 1, 3; +10, 0, +60
    with pytest.raises(ValueError, match="trials"):
        masked.summarize({**ms, "ids -1": [1.0]}, experts, list(ms))
