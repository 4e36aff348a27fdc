# Sourced by ci/fork-gpu/run and ci/fork-gpu/measure on the GPU machine: the carried wheels
# (.whl2) into /tmp/site, the patched fork's vllm/ (.fork) into /tmp/fork with its stand-ins in
# /tmp/fsite, and PYTHONPATH over all three.
rm -rf /tmp/site /tmp/fork /tmp/fsite && mkdir -p /tmp/fork
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl2/*.whl || exit 1
tar xzf .fork/vllm.tgz -C /tmp/fork && python3 ci/fork-gpu/prepare_fork.py /tmp/fork /tmp/fsite || exit 1
export PYTHONPATH=/tmp/fork:/tmp/fsite:/tmp/site LVLLM_ENABLE_NUMA_INTERLEAVE=0
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
