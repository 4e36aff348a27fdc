"""The draft-depth policies the engine checks run, by name: the draft_depth
object of the speculative config (None: vLLM's fixed K)."""

POLICIES = {
    "fixed": None,
    "phase 1/2": {"policy": "phase", "reasoning_depth": 1, "answer_depth": 2},
    "phase 0/2": {"policy": "phase", "reasoning_depth": 0, "answer_depth": 2},
    "adaptive": {"policy": "adaptive", "min_depth": 0},
}
