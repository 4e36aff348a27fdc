# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""measure: this machine's lk_moe cost curve; the typed request, its checks, the timing worker and the analysis."""
