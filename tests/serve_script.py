"""The kind of serving script the fork's users post, for the launch tests: plain Python, no pytest,
so that the CPU engine's Python (which has no pytest) can read it too."""

USERS = """#!/bin/bash
# my DeepSeek-V4 server
export LVLLM_MOE_NUMA_ENABLED=1
export LVLLM_GPU_RESIDENT_MOE_LAYERS=0,1   # what fits on my 5090
export LK_THREADS={threads}
OMP_NUM_THREADS=12
LK_THREAD_BINDING=CPU_CORE vllm serve /models/DeepSeek-V4-Flash \\
  --port 8000 --served-model-name dsv4 \\
  --max-model-len 1048576 --max-num-seqs 2 --kv-cache-dtype fp8_ds_mla \\
  --reasoning-parser deepseek_v4 --tool-call-parser deepseek_v4 --enable-auto-tool-choice \\
  --default-chat-template-kwargs '{{"thinking": true}}' \\
  --compilation_config.cudagraph_mode FULL_DECODE_ONLY \\
  --speculative-config '{spec}'
"""
SPEC = '{"method":"dspark","num_speculative_tokens":2,"draft_sample_method":"greedy"}'
