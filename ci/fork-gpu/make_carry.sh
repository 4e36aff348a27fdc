#!/usr/bin/env bash
# What ci/fork-gpu/run needs on the GPU machine, built here, per TARGET:
#   lvllmds4-x (default; needs pip and a mirror of the fork in DS4X_MIRRORS): .fork/vllm.tgz, the
#     fork's vllm/ at the pin with our series and overlay, and .whl2/, the cp312 wheels the GPU
#     image lacks (lk_moe included). Carry both: run(command="bash ci/fork-gpu/run", carry=[".fork", ".whl2"]).
#   vllm (needs only PyPI): .upstream/vllm.tgz, upstream vLLM 0.32.0's vllm/ (the vllm-cpu-engine
#     target's sdist, which the stand-ins are written for, cached under ~/.cache/ds4x) with its
#     series and our overlay, and .upstream/whl/, the wheels it needs
#     beyond the image: the fork's set less lk_moe, at upstream 0.32.0's own pins where they differ
#     (requirements/common.txt: fastapi < 0.137, llguidance < 1.8, xgrammar == 0.2.8, oss-harmony
#     for openai_harmony; the versions its CPU engine venv resolved). Carry that one folder:
#     run(command='TARGET=vllm bash ci/fork-gpu/run "dense-eager ..."', carry=[".upstream"]).
#     UPSTREAM=vllm: the series' own target instead (vLLM 0.34.0; prepare_fork.py knows its edits;
#     the same wheels; side_by_side and the dflash cases ran on it, docs/gpu-harness.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
TARGET=${TARGET:-lvllmds4-x}
download() {  # DEST WHEEL==VERSION...: cp312 manylinux x86_64 wheels for the GPU image
  local dest=$1; shift
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 -d "$dest" "$@"
}
COMMON="annotated-types==0.8.0 apache-tvm-ffi==0.1.15.post2 cachetools==8.0.2 cbor2==6.3.0 httpcore2==2.16.2
  httpx2==2.16.2 jiter==0.19.0 msgspec==0.23.0 openai==3.57.0 opentelemetry-api==1.45.2
  partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 pydantic==2.14.4 pydantic-core==2.50.5 pyzmq==27.3.0
  sniffio==1.3.1 starlette==1.10.0 truststore==0.10.5 typing-inspection==0.4.5 setproctitle==1.3.8
  blake3==1.0.11 compressed-tensors==0.17.0 loguru==0.7.3"
if [ "$TARGET" = vllm ]; then
  rm -rf .upstream trees/vllm-gpu && mkdir -p .upstream/whl
  printf '*\n' > .upstream/.gitignore  # git ignores the folder: carry it by name
  $PY build.py apply --target "${UPSTREAM:-vllm-cpu-engine}" --dir trees/vllm-gpu -q
  tar czf .upstream/vllm.tgz -C trees/vllm-gpu vllm vllm_ds4x
  download .upstream/whl $COMMON fastapi==0.136.3 llguidance==1.7.6 xgrammar==0.2.8 oss-harmony==0.0.11
  du -shc .upstream/vllm.tgz .upstream/whl
  exit 0
fi
rm -rf .fork trees/fork-gpu && mkdir -p .fork .whl2
$PY build.py apply --target lvllmds4-x --dir trees/fork-gpu -q
tar czf .fork/vllm.tgz -C trees/fork-gpu vllm vllm_ds4x
tar czf .fork/csrc.tgz -C trees/fork-gpu csrc  # build_ops.py: the ops DeepSeek-V4's portable path still calls
download .whl2 $COMMON fastapi==0.165.0 llguidance==1.9.1 xgrammar==0.2.9 openai-harmony==0.0.8 lk-moe==2.7.4
du -shc .fork .whl2
