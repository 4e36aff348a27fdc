#!/usr/bin/env bash
# What ci/fork-gpu/run needs on the GPU machine, built here (needs pip and a mirror of the
# fork in DS4X_MIRRORS): .fork/vllm.tgz, the fork's vllm/ at the pin with our series and
# overlay, and .whl2/, the cp312 wheels the GPU image lacks (lk_moe included).
# Carry both: run(command="bash ci/fork-gpu/run", carry=[".fork", ".whl2"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
rm -rf .fork trees/fork-gpu && mkdir -p .fork .whl2
$PY build.py apply --target lvllmds4-x --dir trees/fork-gpu -q
tar czf .fork/vllm.tgz -C trees/fork-gpu vllm
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 -d .whl2 \
  annotated-types==0.8.0 apache-tvm-ffi==0.1.15.post2 cachetools==8.0.2 cbor2==6.3.0 fastapi==0.165.0 \
  httpcore2==2.16.2 httpx2==2.16.2 jiter==0.19.0 llguidance==1.9.1 msgspec==0.23.0 openai==3.57.0 \
  openai-harmony==0.0.8 opentelemetry-api==1.45.2 partial-json-parser==0.2.1.1.post7 pybase64==1.5.1 \
  pydantic==2.14.4 pydantic-core==2.50.5 pyzmq==27.3.0 sniffio==1.3.1 starlette==1.10.0 truststore==0.10.5 \
  typing-inspection==0.4.5 xgrammar==0.2.9 setproctitle==1.3.8 blake3==1.0.11 \
  compressed-tensors==0.17.0 loguru==0.7.3 lk-moe==2.3.3
du -shc .fork .whl2
