"""draft_depth beside vLLM's enable_adaptive_verification: one start-up error naming both
options and the fix (the core's composition module, called from SpeculativeConfig's validation)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vllm_ds4x.depth import composition
from vllm_ds4x.depth import policy as draft_depth

PHASE = {"policy": "phase", "reasoning_depth": 1}


def test_both_set_is_refused_naming_both_and_the_fix() -> None:
    spec = SimpleNamespace(draft_depth=PHASE, enable_adaptive_verification=True)
    with pytest.raises(ValueError) as caught:
        composition.refuse_with_adaptive_verification(spec)
    message = str(caught.value)
    assert "draft_depth" in message and "enable_adaptive_verification" in message
    assert "remove draft_depth" in message and "set enable_adaptive_verification to false" in message
    assert type(caught.value).__name__ == draft_depth.DraftDepthError.__name__  # the overlay's config error


@pytest.mark.parametrize("spec", [
    SimpleNamespace(draft_depth=PHASE, enable_adaptive_verification=False),
    SimpleNamespace(draft_depth=None, enable_adaptive_verification=True),
    SimpleNamespace(draft_depth=PHASE),  # a vLLM without adaptive verification (the fork)
], ids=["draft-depth-only", "adaptive-verification-only", "no-such-option"])
def test_either_alone_passes(spec: SimpleNamespace) -> None:
    composition.refuse_with_adaptive_verification(spec)
