"""Which Python runs measure's timing worker, as each command's --help says: `python -m vllm_ds4x
measure` uses the one running it; `plan --measure` leaves it unset, so that plan finds one with
lk_moe or makes the venv ds4x keeps for it."""

from __future__ import annotations

import argparse
import sys

from ds4x.cli import parser
from ds4x.deploy import plan
from vllm_ds4x.measure import cli as measure_cli
from vllm_ds4x.measure.request import MeasureRequest


def help_of(p: argparse.ArgumentParser, option: str) -> str:
    return next(a.help or "" for a in p._actions if option in a.option_strings)


def test_measure_runs_the_worker_in_this_python_by_default() -> None:
    p = argparse.ArgumentParser()
    measure_cli.add_arguments(p)
    assert p.parse_args(["--config", "c.json"]).python == sys.executable
    assert "this one" in help_of(p, "--python") and "venv" not in help_of(p, "--python")


def test_plan_measure_leaves_it_to_plan_which_finds_or_makes_the_venv() -> None:
    args = parser().parse_args(["plan", "--measure"])
    assert MeasureRequest.of(vars(args)).python is None
    plan_parser = argparse.ArgumentParser()
    plan.add_arguments(plan_parser)  # one --python: plan's own
    assert "venv" in help_of(plan_parser, "--python")
