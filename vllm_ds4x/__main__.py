# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""`python -m vllm_ds4x`: print this build's ds4x provenance.
`python -m vllm_ds4x measure ...`: this machine's lk_moe cost curve and draft-depth
advice (vllm_ds4x/measure/cli.py; its --python needs lk_moe)."""

import json
import sys

from vllm_ds4x.measure import cli as measure
from vllm_ds4x.provenance import record

if sys.argv[1:2] == ["measure"]:
    sys.exit(measure.main(sys.argv[2:]))

found = record()
print(json.dumps(found, indent=2, sort_keys=True) if found else "this vLLM was not built by ds4x")
sys.exit(0 if found else 1)
