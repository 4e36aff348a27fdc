"""plan's typed request and result: the launch check plans at a script's own settings without touching the
caller's request, and compute's result is typed (no module riding in a dict)."""

from __future__ import annotations

from pathlib import Path

from ds4x.cli import parser
from ds4x.deploy import launch, plan
from ds4x.deploy.planned import Plan, PlanRequest


def request(*options: str) -> PlanRequest:
    return PlanRequest.of(vars(parser().parse_args(["plan", *options])))


def test_the_request_holds_plan_s_options_typed() -> None:
    req = request("--max-model-len", "65536", "--acceptance", "0.5", "0.9")
    assert req.max_model_len == 65536 and req.acceptance == (0.5, 0.9) and req.tp == 1
    assert request().acceptance == (0.39, 0.89)


def test_check_launch_plans_at_the_script_s_settings_on_a_copy(tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve m --max-model-len 4096 --gpu-memory-utilization 0.1\n")
    req, seen = request(), []

    def compute(asked: PlanRequest) -> Plan:
        seen.append(asked)
        return plan.compute(asked)

    errors = launch.check(launch.read(script), req, compute).errors
    assert (seen[0].max_model_len, seen[0].gpu_memory_utilization) == (4096, 0.1)
    assert (req.max_model_len, req.gpu_memory_utilization) == (1048576, 0.92)  # the caller's, unchanged
    assert any("does not fit" in e for e in errors)
