"""CPU-GPU overlap (#20), the pure part: the LVLLM_MOE_OVERLAP switch and the split
of a uniform decode batch into two micro-batches whose metadata are views.

The module under test is the core's, which the fork overlay ships."""

from __future__ import annotations

import re
from typing import Any

import pytest

from vllm_ds4x.moe import overlap_plan as op


def halves(num_reqs: int, q: int) -> tuple[op.MicroBatch, op.MicroBatch]:
    """split_uniform's two micro-batches, where there must be two."""
    split = op.split_uniform(num_reqs, q)
    assert split is not None
    return split


@pytest.mark.parametrize(("value", "level"), [(None, "off"), ("", "off"), ("off", "off"), (" Shared ", "shared"),
                                              ("ubatch", "ubatch")])
def test_levels(value: str | None, level: str) -> None:
    assert op.parse_level(value) == level


@pytest.mark.parametrize("value", ["1", "on", "sharde", "shared,ubatch"])
def test_bad_level_names_the_variable_and_choices(value: str) -> None:
    with pytest.raises(op.OverlapError) as e:
        op.parse_level(value)
    assert str(e.value) == f"LVLLM_MOE_OVERLAP={value!r}: expected one of off, shared, ubatch"


@pytest.mark.parametrize(("seqs", "k", "engine", "budget"), [(2, 2, 8192, 6), (4, 0, 512, 4), (256, 3, 512, 512)])
def test_micro_batch_builders_get_a_decode_graphs_tokens(seqs: int, k: int, engine: int, budget: int) -> None:
    assert op.micro_batch_token_budget(seqs, k, engine) == budget


@pytest.mark.parametrize(("seqs", "k"), [(0, 2), (2, -1)])
def test_a_budget_out_of_range_is_refused(seqs: int, k: int) -> None:
    with pytest.raises(ValueError, match=f"max_num_seqs={seqs}, K={k}"):
        op.micro_batch_token_budget(seqs, k, 512)


@pytest.mark.parametrize(("value", "tokens"), [(None, 1), ("", 1), (" 3 ", 3), ("1", 1)])
def test_micro_batch_tokens_parse(value: str | None, tokens: int) -> None:
    assert op.parse_tokens(value) == tokens


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", "\uff11\uff16", "9" * 5000])
def test_bad_micro_batch_tokens_name_the_variable(value: str) -> None:
    with pytest.raises(op.OverlapError, match=f"LVLLM_MOE_UBATCH_TOKENS='{re.escape(value[:40])}'"):
        op.parse_tokens(value)


def slices(num_reqs: int, q: int) -> list[tuple[int, int, int, int]]:
    split = op.split_uniform(num_reqs, q)
    assert split is not None
    return [(m.req_start, m.req_stop, m.tok_start, m.tok_stop) for m in split]


def test_two_requests_split_one_each_at_every_depth() -> None:
    assert slices(2, 1) == [(0, 1, 0, 1), (1, 2, 1, 2)]
    assert slices(2, 3) == [(0, 1, 0, 3), (1, 2, 3, 6)]


def test_odd_batches_give_the_first_micro_batch_the_extra_request() -> None:
    assert slices(3, 2) == [(0, 2, 0, 4), (2, 3, 4, 6)]
    assert slices(5, 1) == [(0, 3, 0, 3), (3, 5, 3, 5)]


@pytest.mark.parametrize(("num_reqs", "q"), [(n, q) for n in range(2, 9) for q in range(1, 5)])
def test_micro_batches_cover_the_batch_on_request_boundaries(num_reqs: int, q: int) -> None:
    a, b = halves(num_reqs, q)
    assert (a.tok_start, a.tok_stop, b.tok_start, b.tok_stop) == (0, b.tok_start, a.tok_stop, num_reqs * q)
    assert a.num_tokens == a.num_reqs * q and b.num_tokens == b.num_reqs * q
    assert 0 <= a.num_reqs - b.num_reqs <= 1


def test_one_request_is_not_split() -> None:
    assert op.split_uniform(1, 3) is None
    with pytest.raises(ValueError, match="query_len=0"):
        op.split_uniform(2, 0)


@pytest.mark.parametrize(("num_reqs", "q"), [(2, 1), (2, 3), (3, 2), (4, 3)])
def test_query_start_loc_prefix_is_each_micro_batch_own(num_reqs: int, q: int) -> None:
    """The batch's query_start_loc of a uniform batch is [0, q, 2q, ...]; each micro-batch's
    own (token offsets from its first token) equals a prefix of it, so a view serves."""
    batch = [i * q for i in range(num_reqs + 1)]
    for micro in halves(num_reqs, q):
        start, stop = op.query_start_loc_view(micro, q)
        own = [t - micro.tok_start for t in batch[micro.req_start:micro.req_stop + 1]]
        assert batch[start:stop] == own


def test_token_rows_do_not_overlap() -> None:
    """Each micro-batch's token rows (its rows of cpu_decode's shared output too)."""
    a, b = halves(2, 3)
    assert (a.tok_start, a.tok_stop) == (0, 3) and (b.tok_start, b.tok_stop) == (3, 6)


SHAPE: dict[str, Any] = {"v2_runner": True, "data_parallel": 1, "pipeline_parallel": 1, "full_decode_graph": True, "num_reqs": 2,
         "query_len": 3}


def test_ubatch_splits_the_users_step() -> None:
    split = op.plan_split("ubatch", op.StepShape(**SHAPE), max_tokens=3)
    assert split is not None and [m.num_tokens for m in split] == [3, 3]


def test_by_default_only_depth_0_splits() -> None:
    """Two requests verifying one token each split; verifying 2 or 3 each, lk_moe's
    one call costs less than two (the H200's curves), so the step runs whole."""
    split = op.plan_split("ubatch", op.StepShape(**{**SHAPE, "query_len": 1}))
    assert split is not None and [m.num_tokens for m in split] == [1, 1]
    assert op.plan_split("ubatch", op.StepShape(**{**SHAPE, "query_len": 2})) is None
    assert op.plan_split("ubatch", op.StepShape(**{**SHAPE, "query_len": 2}), max_tokens=2) is not None


@pytest.mark.parametrize(("level", "change"), [
    ("off", {}), ("shared", {}), ("ubatch", {"v2_runner": False}), ("ubatch", {"data_parallel": 2}),
    ("ubatch", {"pipeline_parallel": 2}), ("ubatch", {"full_decode_graph": False}), ("ubatch", {"num_reqs": 1}),
])
def test_every_other_step_runs_whole(level: Any, change: dict[str, object]) -> None:
    assert op.plan_split(level, op.StepShape(**{**SHAPE, **change}), max_tokens=3) is None
