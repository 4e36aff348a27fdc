"""The one typed parse of draft_depth: each policy's own fields, typed and in range, each refusal naming the
field, the value and an example; valid configs parse to what they always meant."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from vllm_ds4x.depth import policy as dd


@pytest.mark.parametrize(("raw", "message"), [
    ({"policy": "phase", "reasoning_depth": True}, "reasoning_depth=True: expected 0..2"),  # a bool is not a depth
    ({"policy": "phase", "answer_depth": 1.0}, "answer_depth=1.0: expected 0..2"),  # 1.0 is not a depth
    ({"policy": "adaptive", "hold_steps": 4.0}, "hold_steps=4.0: expected a whole number >= 0, e.g. 16"),
    ({"policy": "adaptive", "probe_interval": 0}, "probe_interval=0: expected a whole number >= 1, e.g. 8"),
    ({"policy": "adaptive", "explore_steps": -1}, "explore_steps=-1: expected a whole number >= 0, e.g. 16"),
    ({"policy": "adaptive", "hysteresis": math.nan}, "hysteresis=nan: expected a number >= 0, e.g. 0.01"),
    ({"policy": "adaptive", "prior_acceptance": math.inf}, "prior_acceptance=inf: expected a number in (0, 1)"),
    ({"policy": "adaptive", "smoothing": "0.1"}, "smoothing='0.1': expected a number in (0, 1], e.g. 0.03"),
    ({"policy": "adaptive", "prior_acceptance": False}, "prior_acceptance=False: expected a number in (0, 1)"),
    ({"policy": "adaptive", "prior_acceptance": {"answer": 1.0}},
     "prior_acceptance.answer=1.0: expected a number in (0, 1)"),
    ({"policy": "adaptive", "prior_acceptance": {"thinking": 0.5}},
     "prior_acceptance={'thinking': 0.5}: expected a rate, or rates by phase (reasoning, answer)"),
    ({"policy": "adaptive", "step_cost": "123"}, "step_cost: expected 3 positive costs (1..3 tokens verified), "
                                                 "e.g. [1.0, 1.6, 2.2]; got '123'"),  # a string is not a list
    ({"policy": "adaptive", "step_cost": [1, math.nan, 3]}, "step_cost: expected 3 positive costs"),
    ({"policy": "adaptive", "step_cost": {"1": [1, True, 3]}}, "step_cost[1]: expected 3 positive costs"),
    ({"policy": "adaptive", "step_cost": {"1.5": [1, 2, 3]}}, "step_cost: expected a list of costs"),
    ({"graph_depths": "2"}, "graph_depths='2': expected depths in 0..2 that include 2"),
    ({"graph_depths": [True, 2]}, "graph_depths=[True, 2]: expected depths in 0..2"),
    ({"verify": "requests"}, "verify='requests': expected one of 'batch', 'request', e.g. \"request\""),
    ({"policy": 1}, "policy=1: expected one of fixed, phase, adaptive, e.g. \"phase\""),
    ([1], "draft_depth=[1]: expected an object, e.g. {\"policy\": \"phase\", \"reasoning_depth\": 1}"),
])
def test_a_value_of_the_wrong_type_or_range_is_named_with_an_example(raw: Any, message: str) -> None:
    with pytest.raises(dd.DraftDepthError, match=re.escape(message)) as caught:
        dd.parse_draft_depth(raw, 2)
    assert "e.g." in str(caught.value)


def test_a_field_of_another_policy_is_refused_with_the_policy_s_own() -> None:
    with pytest.raises(dd.DraftDepthError) as caught:
        dd.parse_draft_depth({"policy": "phase", "min_depth": 0}, 2)
    assert str(caught.value).startswith(
        "speculative_config.draft_depth: unknown field(s) ['min_depth'] for policy 'phase'; "
        "known: ['answer_depth', 'graph_depths', 'policy', 'reasoning_depth', 'verify']")


def test_a_huge_value_is_shown_cut_short() -> None:
    with pytest.raises(dd.DraftDepthError) as caught:
        dd.parse_draft_depth({"policy": "adaptive", "step_cost": list(range(10**5))}, 2)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize(("raw", "typed"), [
    (None, dd.FixedDepth()),
    ({}, dd.FixedDepth()),
    ({"policy": "fixed", "graph_depths": [2, 0]}, dd.FixedDepth(graph_depths=(2, 0))),
    ({"policy": "phase", "reasoning_depth": 0, "answer_depth": None}, dd.PhaseDepth(reasoning_depth=0)),
    ({"policy": "phase", "verify": "request"}, dd.PhaseDepth(verify="request")),
    ({"policy": "adaptive", "min_depth": 0, "smoothing": 1, "step_cost": {"1": [1, 2, 3], 2: [1.0, 1.5, 2.0]}},
     dd.AdaptiveDepth(min_depth=0, smoothing=1.0, step_cost={1: (1.0, 2.0, 3.0), 2: (1.0, 1.5, 2.0)})),
])
def test_valid_configs_parse_to_their_policy_s_typed_object(raw: Any, typed: Any) -> None:
    assert dd.parse_draft_depth(raw, 2) == typed
    assert dd.DraftDepthConfig.from_dict(raw, 2) == typed  # the name vLLM's config validation calls


def test_the_hooks_share_one_parse_of_one_config() -> None:
    raw = {"policy": "phase", "reasoning_depth": 0}
    assert dd.configured_draft_depth(raw, 2) is dd.configured_draft_depth(dict(raw), 2)
    assert dd.configured_draft_depth(raw, 3) is not dd.configured_draft_depth(raw, 2)
    with pytest.raises(dd.DraftDepthError, match="hysteresis=nan"):
        dd.configured_draft_depth({"policy": "adaptive", "hysteresis": math.nan}, 2)


@pytest.mark.parametrize(("raw", "reasoning", "answer"), [
    (None, 2, 2), ({"policy": "phase"}, 1, 2), ({"policy": "phase", "reasoning_depth": 0}, 0, 2),
    ({"policy": "adaptive"}, None, None)])
def test_each_policy_says_the_depth_it_chooses_in_a_phase(raw: Any, reasoning: int | None, answer: int | None) -> None:
    config = dd.parse_draft_depth(raw, 2)
    assert (config.phase_depth(dd.REASONING, 2), config.phase_depth(dd.ANSWER, 2)) == (reasoning, answer)


def test_a_prior_acceptance_by_phase_leaves_the_phase_not_given_at_the_default() -> None:
    config = dd.parse_draft_depth({"policy": "adaptive", "prior_acceptance": {"answer": 0.93}}, 2)
    assert isinstance(config, dd.AdaptiveDepth)
    assert config.prior_by_phase() == {"reasoning": 0.7, "answer": 0.93}
    one = dd.parse_draft_depth({"policy": "adaptive", "prior_acceptance": 0.5}, 2)
    assert isinstance(one, dd.AdaptiveDepth) and one.prior_by_phase() == {"reasoning": 0.5, "answer": 0.5}
