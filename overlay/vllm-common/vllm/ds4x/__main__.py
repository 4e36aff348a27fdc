# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""`python -m vllm.ds4x`: print this build's ds4x provenance.
`python -m vllm.ds4x measure ...`: this machine's lk_moe cost curve and draft-depth
advice (Lvllmds4-x builds; see vllm/ds4x/measure.py, from ds4x/core)."""

import json
import sys

if sys.argv[1:2] == ["measure"]:
    try:
        from vllm.ds4x import measure
    except ImportError:
        sys.exit("error: measure needs the Lvllmds4-x build of ds4x (lk_moe is its CPU MoE engine)")
    sys.exit(measure.main(sys.argv[2:]))

from vllm.ds4x.provenance import record

found = record()
print(json.dumps(found, indent=2, sort_keys=True) if found else "this vLLM was not built by ds4x")
sys.exit(0 if found else 1)
