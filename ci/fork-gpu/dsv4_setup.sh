# Sourced by ci/fork-gpu/run and ci/fork-gpu/e2e for DeepSeek-V4 + DSpark: $1 the model folder
# (dsv4_model.py writes configs and tokenizer there; weights are made in the engine process),
# $2 the log folder. Builds the compiled ops of the portable path from the fork's own CUDA
# sources (.fork/csrc.tgz; build_ops.py) and exports DS4X_DSV4_OPS, where the cases load them.
python3 ci/fork-gpu/dsv4_model.py "$1" > "$2/dsv4_model.log" 2>&1 || { tail -20 "$2/dsv4_model.log"; exit 1; }
rm -rf /tmp/csrc && tar xzf .fork/csrc.tgz -C /tmp && export DS4X_DSV4_OPS=/tmp/dsv4_ops
MAX_JOBS=16 python3 ci/fork-gpu/build_ops.py /tmp/csrc "$DS4X_DSV4_OPS" > "$2/build_ops.log" 2>&1 \
  || { tail -30 "$2/build_ops.log"; exit 1; }
# DSpark's draft layer's experts stay on lk_moe: a GPU-resident MXFP4 layer runs Marlin
# (gptq_marlin_repack and its MoE GEMM), compiled kernels not built here (docs/gpu-harness.md)
export LVLLM_GPU_RESIDENT_DRAFT_LAYERS=${LVLLM_GPU_RESIDENT_DRAFT_LAYERS:-0}
