# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""`python -m vllm.ds4x`: print this build's ds4x provenance."""

import json
import sys

from vllm.ds4x.provenance import record

found = record()
print(json.dumps(found, indent=2, sort_keys=True) if found else "this vLLM was not built by ds4x")
sys.exit(0 if found else 1)
