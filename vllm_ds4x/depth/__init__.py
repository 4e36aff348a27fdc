# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Draft depth: the policy (config, strategies, estimates), its simulator and the scheduler's seams; pure Python."""
