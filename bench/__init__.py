"""Benchmarks that print figures and ratios, run as modules from the checkout root (python -m bench.depth_sim)."""
