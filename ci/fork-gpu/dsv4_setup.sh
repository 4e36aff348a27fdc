# Sourced by ci/fork-gpu/run and ci/fork-gpu/e2e for DeepSeek-V4 + DSpark: $1 the model folder
# (dsv4_model.py writes configs and tokenizer there; weights are made in the engine process),
# $2 the log folder. Builds the compiled ops of the portable path from the fork's own CUDA
# sources (.fork/csrc.tgz; build_ops.py) and exports DS4X_DSV4_OPS, where the cases load them.
# DSV4_RESIDENT (default 0,1: the user's LVLLM_GPU_RESIDENT_MOE_LAYERS; none: every MoE layer on
# lk_moe, as before): those target layers' MXFP4 experts stay on the GPU, where the fork runs them
# with Marlin (build_ops.py --marlin compiles its kernels, one type set, from the fork's sources).
export DSV4_RESIDENT=${DSV4_RESIDENT-0,1}
python3 ci/fork-gpu/dsv4_model.py "$1" > "$2/dsv4_model.log" 2>&1 || { tail -20 "$2/dsv4_model.log"; exit 1; }
rm -rf /tmp/csrc && tar xzf .fork/csrc.tgz -C /tmp && export DS4X_DSV4_OPS=/tmp/dsv4_ops
MAX_JOBS=16 python3 ci/fork-gpu/build_ops.py /tmp/csrc "$DS4X_DSV4_OPS" > "$2/build_ops.log" 2>&1 \
  || { tail -30 "$2/build_ops.log"; exit 1; }
if [ -n "$DSV4_RESIDENT" ] && [ "$DSV4_RESIDENT" != none ]; then
  export LVLLM_GPU_RESIDENT_MOE_LAYERS=$DSV4_RESIDENT
  MAX_JOBS=16 python3 ci/fork-gpu/build_ops.py --marlin /tmp/csrc "$DS4X_DSV4_OPS" > "$2/build_marlin.log" 2>&1 \
    || { tail -30 "$2/build_marlin.log"; exit 1; }
  tail -2 "$2/build_marlin.log"
else
  unset LVLLM_GPU_RESIDENT_MOE_LAYERS
fi
# DSpark's draft layer's experts stay on lk_moe (our series would place it on the GPU): its
# cpu_decode is then captured in DSpark's own graphs too
export LVLLM_GPU_RESIDENT_DRAFT_LAYERS=${LVLLM_GPU_RESIDENT_DRAFT_LAYERS:-0}
