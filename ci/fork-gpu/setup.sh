# Sourced by ci/fork-gpu/run and ci/fork-gpu/measure on the GPU machine, per TARGET (default
# lvllmds4-x: the fork, carried as .fork and .whl2; vllm: upstream vLLM (0.32.0 or 0.34.0) patched by our
# series, carried as .upstream, see make_carry.sh): the carried wheels into /tmp/site, the patched
# vllm/ into /tmp/fork with its stand-ins (prepare_fork.py) and dist-info in /tmp/fsite, and
# PYTHONPATH over all three, then the checkout (the caller's working directory, its root) for the
# engine helpers (engine/) and bench/ that the harness's scripts import.
TARGET=${TARGET:-lvllmds4-x}
case $TARGET in
  lvllmds4-x) TREE=.fork/vllm.tgz WHEELS=.whl2 ;;
  vllm) TREE=.upstream/vllm.tgz WHEELS=.upstream/whl ;;
  *) echo "TARGET=$TARGET: lvllmds4-x or vllm"; exit 1 ;;
esac
rm -rf /tmp/site /tmp/fork /tmp/fsite && mkdir -p /tmp/fork
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $WHEELS/*.whl || exit 1
tar xzf $TREE -C /tmp/fork && python3 ci/fork-gpu/prepare_fork.py /tmp/fork /tmp/fsite $TARGET || exit 1
export PYTHONPATH=/tmp/fork:/tmp/fsite:/tmp/site:$PWD LVLLM_ENABLE_NUMA_INTERLEAVE=0 DS4X_GPU_TARGET=$TARGET
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
# Torch's CPU threads as `vllm serve` has them: its multiprocessing executor sets OMP_NUM_THREADS=1
# in each GPU worker where unset. The harness runs the engine in-process
# (VLLM_ENABLE_V1_MULTIPROCESSING=0), where torch would keep a thread a core beside lk_moe's LK_THREADS.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# Every engine the harness starts: offline, no NVLink multicast (this workplace's machines), vLLM's
# own sampler (FlashInfer's is not in the image)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CACHE_ROOT=/tmp/vllm_cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 VLLM_USE_FLASHINFER_SAMPLER=0
# The device sends back at most 8 files a call: pack_logs DIR puts DIR's logs into DIR/logs.tgz
pack_logs() { (cd "$1" && ls *.log >/dev/null 2>&1 && tar czf logs.tgz *.log && rm -f *.log) || true; }
