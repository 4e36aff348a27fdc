# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""MoE placement and overlap arithmetic the fork's runtime reads; pure Python."""
