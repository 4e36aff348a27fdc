# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""ds4x additions to vLLM (overlay modules, shipped by the ds4x patch series).

`python -m vllm_ds4x` prints the provenance record of this build.
"""
