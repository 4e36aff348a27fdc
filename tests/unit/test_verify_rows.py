"""Per-request verify depths in one uniform decode batch (vllm_ds4x.depth.verify_rows): the rows masked and the
tokens kept, checked against verifying fewer drafts directly."""

from __future__ import annotations

import random

from vllm_ds4x.depth import verify_rows as vr


def test_a_batch_with_no_request_below_its_drafts_masks_nothing() -> None:
    assert vr.own_depths({}, ["r", "a"], [2, 2]) is None
    assert vr.own_depths({"r": 2}, ["r", "a"], [2, 2]) is None  # its own depth is the batch's
    assert vr.own_depths({"x": 0}, ["r", "a"], [2, 2]) is None  # not in this batch


def test_a_reasoning_request_at_depth_0_beside_an_answer_at_2() -> None:
    # rows: r = [0, 1, 2] (its last token, then two drafts), a = [3, 4, 5]
    own = vr.own_depths({"r": 0}, ["r", "a"], [2, 2])
    assert own == [0, 2]
    assert vr.masked_rows(own, [2, 2], [3, 6]) == [(1, 3)]  # r's two drafts
    assert vr.kept_tokens(own) == [1, 3]


def test_a_request_that_drafted_fewer_keeps_its_own_count() -> None:
    own = vr.own_depths({"a": 1}, ["r", "a"], [0, 2])  # r drafted nothing (a prefill's last chunk, say)
    assert own == [0, 1]
    assert vr.masked_rows(own, [0, 2], [5, 8]) == [(7, 8)]
    assert vr.kept_tokens(own) == [1, 2]


def greedy(inputs: list[int], target: list[int]) -> list[int]:
    """What rejection sampling keeps of one request: drafts inputs[1:] while each equals the target's
    token before it, then the target's token at the first miss (or after the last draft)."""
    kept = []
    for position, token in enumerate(target):
        kept.append(token)
        if position + 1 >= len(inputs) or inputs[position + 1] != token:
            break
    return kept


def test_keeping_1_plus_own_depth_tokens_is_verifying_own_depth_drafts() -> None:
    rng = random.Random(7)
    for _ in range(500):
        depth = rng.randint(0, 3)
        mine = rng.randint(0, depth)
        drafts = [rng.randint(0, 2) for _ in range(depth)]
        target = [rng.randint(0, 2) for _ in range(depth + 1)]  # the target's token after each row
        inputs = [9, *drafts]
        at_batch_depth = greedy(inputs, target)[:vr.kept_tokens([mine])[0]]
        assert at_batch_depth == greedy(inputs[:1 + mine], target[:1 + mine])


class Stats:
    """The counts of vLLM's SpecDecodingStats that uncount changes."""

    def __init__(self, drafts: int, tokens: int, per_position: list[int]) -> None:
        self.num_drafts, self.num_draft_tokens, self.num_draft_tokens_per_pos = drafts, tokens, per_position


def test_the_scheduler_counts_what_each_request_verified() -> None:
    """r verified 0 of its 2 drafts (a step that verified nothing), m 1 of 2, a all 2: vLLM counted 3
    drafts of 2 tokens each; what they verified is 2 drafts, 3 tokens, positions [2, 1]."""
    spec = {"r": [30, 31], "m": [30, 31], "a": [30, 31]}
    stats = Stats(3, 6, [3, 3])
    verified = vr.own_drafts(spec, {"r": 0, "m": 1}, None, lambda request_id: True, stats)
    assert verified == {"m": [30], "a": [30, 31]}
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_draft_tokens_per_pos) == (2, 3, [2, 1])


def test_a_request_vllm_did_not_count_leaves_its_stats_alone() -> None:
    """Aborted while its step ran, or refused drafts the grammar cut: counted as vLLM counted them."""
    stats = Stats(1, 1, [1, 0])
    assert vr.own_drafts({"r": [30, 31]}, {"r": 0}, None, lambda request_id: False, stats) == {}
    assert (stats.num_drafts, stats.num_draft_tokens) == (1, 1)
    refused = Stats(1, 1, [1, 0])  # vLLM counted 2 - 1 refused drafts
    vr.own_drafts({"r": [30, -1]}, {"r": 1}, {"r": 1}, lambda request_id: True, refused)
    assert (refused.num_drafts, refused.num_draft_tokens, refused.num_draft_tokens_per_pos) == (1, 1, [1, 0])
