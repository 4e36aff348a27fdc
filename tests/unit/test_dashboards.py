"""The draft-depth dashboards: the committed Grafana JSON and Perses YAML are what
examples/dashboards/make_dashboards.py writes from its one list of panels, and every
query (and the PromQL in vllm_ds4x/hooks/spec_metrics.py) parses as PromQL."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import promql_parser
import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
METRIC = re.compile(r"vllm:[a-z_]+")


def make() -> ModuleType:
    return load_script("examples/dashboards/make_dashboards.py")


def queries() -> list[str]:
    return [query for _, _, query, _, _ in make().PANELS]


def test_the_committed_dashboards_are_the_generated_ones() -> None:
    for path, text in make().rendered().items():
        assert path.read_text(encoding="utf-8") == text, f"{path}: run examples/dashboards/make_dashboards.py"


@pytest.mark.parametrize("query", queries())
def test_every_dashboard_query_parses(query: str) -> None:
    promql_parser.parse(query.replace("$__rate_interval", "5m"))
    assert METRIC.search(query)


def test_the_promql_in_the_metrics_docs_parses() -> None:
    doc = (ROOT / "vllm_ds4x/hooks/spec_metrics.py").read_text()
    found = [block.strip() for block in re.findall(r"::\n\n((?:    .+\n)+)", doc) if "rate(" in block]
    assert len(found) >= 2
    for query in found:
        promql_parser.parse(" ".join(query.split()))
        assert "* depth" not in query  # a label is no number: the old mean-depth query multiplied by one
