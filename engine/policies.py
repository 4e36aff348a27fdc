"""The draft-depth policies the engine checks run, by name: the draft_depth
object of the speculative config (None: vLLM's fixed K), from the one table
of named policies (vllm_ds4x.depth.named_policies)."""

from vllm_ds4x.depth.named_policies import harness_policies

K = 2  # the engine checks' num_speculative_tokens

POLICIES = {policy.engine_name: policy.draft_depth for policy in harness_policies(K).values()}
