# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""What the patches call: the only modules that import vLLM (or torch at their top)."""
