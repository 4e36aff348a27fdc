"""Per-request verify depths in one uniform decode batch (ds4x.core.verify_rows): the rows masked and the
tokens kept, checked against verifying fewer drafts directly."""

from __future__ import annotations

import random

from ds4x.core import verify_rows as vr


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
