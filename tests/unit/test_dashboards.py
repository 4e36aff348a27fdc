"""The dashboards (draft depth; lk_moe's expert pool): the committed Grafana JSON and Perses
YAML are what examples/dashboards/make_dashboards.py writes from its lists of panels, every
query (and the PromQL in vllm_ds4x/hooks/spec_metrics.py and pool_metrics.py) parses as PromQL,
and the pool's queries name the metrics vllm_ds4x.hooks.pool_metrics exports."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import promql_parser
import pytest

from tests.scripts import load_script
from vllm_ds4x.hooks import pool_metrics

ROOT = Path(__file__).resolve().parents[2]
METRIC = re.compile(r"vllm:[a-z_]+")


def make() -> ModuleType:
    return load_script("examples/dashboards/make_dashboards.py")


def queries() -> list[str]:
    """The draft-depth dashboard's (a served engine exports every metric they name)."""
    return [query for _, _, query, _, _ in make().PANELS]


def pool_queries() -> list[str]:
    return [query for _, _, query, _, _ in make().POOL_PANELS]


def pool_exported() -> set[str]:
    """The names PoolProm registers, as Prometheus exports them (a counter with `_total`)."""
    names: set[str] = set()

    class Gauge:
        suffix = ""

        def __init__(self, name: str, documentation: str, labelnames: list[str], **_: object) -> None:
            names.add(name + self.suffix)

        def labels(self, *_: object) -> Gauge:
            return self

        def inc(self, _: float) -> None: ...

        def set(self, _: float) -> None: ...

    class Counter(Gauge):
        suffix = "_total"

    pool = pool_metrics.PoolProm(Counter, Gauge, ["model_name", "engine"], {0: ["m", "0"]})
    pool.observe(pool_metrics.PoolGrowth())
    return names


def test_the_committed_dashboards_are_the_generated_ones() -> None:
    for path, text in make().rendered().items():
        assert path.read_text(encoding="utf-8") == text, f"{path}: run examples/dashboards/make_dashboards.py"


def test_each_dashboard_is_written_in_both_formats() -> None:
    written = {(path.parent.name, path.name) for path in make().rendered()}
    assert written == {(kind, f"{name}.{ext}") for name in ("ds4x-draft-depth", "ds4x-expert-pool")
                       for kind, ext in (("grafana", "json"), ("perses", "yaml"))}


@pytest.mark.parametrize("query", queries() + pool_queries())
def test_every_dashboard_query_parses(query: str) -> None:
    promql_parser.parse(query.replace("$__rate_interval", "5m"))
    assert METRIC.search(query)


def test_the_pool_dashboard_asks_for_the_pool_metrics_the_engine_exports() -> None:
    exported = pool_exported()
    assert exported == {"vllm:lk_moe_pool_hits_total", "vllm:lk_moe_pool_misses_total", "vllm:lk_moe_pool_pumps_total",
                        "vllm:lk_moe_pool_pumped_bytes_total", "vllm:lk_moe_pool_cover_miss_total",
                        "vllm:lk_moe_pool_cover_dup_total", "vllm:lk_moe_device_memory_bytes"}
    asked = {name for query in pool_queries() for name in METRIC.findall(query)}
    assert asked - exported == {"vllm:generation_tokens_total"}  # vLLM's own, beside the pool's
    assert exported <= asked, sorted(exported - asked)  # and every pool metric has a panel
    panels = {key: query for key, _, query, _, _ in make().POOL_PANELS}
    hits, misses = (f"rate(vllm:lk_moe_pool_{c}_total[$__rate_interval])" for c in ("hits", "misses"))
    assert panels["hit_ratio"] == (f"sum by (engine) ({hits}) / (sum by (engine) ({hits}) + "
                                   f"sum by (engine) ({misses}))")
    assert "vllm:lk_moe_pool_pumped_bytes_total" in panels["pumped_bytes"]


def test_no_draft_depth_panel_asks_for_the_pool() -> None:
    """A served engine without the pool exports no pool metric (tests/integration/test_server_depth.py)."""
    assert not any("lk_moe" in query for query in queries())


@pytest.mark.parametrize("module, least", [("spec_metrics", 2), ("pool_metrics", 2)])
def test_the_promql_in_the_metrics_docs_parses(module: str, least: int) -> None:
    doc = (ROOT / f"vllm_ds4x/hooks/{module}.py").read_text()
    found = [block.strip() for block in re.findall(r"::\n\n((?:    .+\n)+)", doc) if "rate(" in block]
    assert len(found) >= least
    for query in found:
        promql_parser.parse(" ".join(query.split()))
        assert "* depth" not in query  # a label is no number: the old mean-depth query multiplied by one
    if module == "pool_metrics":
        named = {name for query in found for name in METRIC.findall(query)}
        assert named and named <= pool_exported(), sorted(named - pool_exported())


def test_the_pool_promql_in_expert_pool_md_parses_and_names_exported_metrics() -> None:
    doc = (ROOT / "docs/expert-pool.md").read_text()
    section = doc[doc.index("## Watching it"):doc.index("## Not done yet")]
    blocks = [" ".join(b.split()) for b in re.findall(r":\n\n((?:    .+\n)+)", section) if "rate(" in b]
    inline = re.findall(r"`(sum\(rate\(vllm:[^`]+)`", section)
    assert len(blocks) == 1 and len(inline) == 1
    for query in blocks + inline:
        promql_parser.parse(query)
        assert set(METRIC.findall(query)) <= pool_exported()
    tabled = set(re.findall(r"^\| `(vllm:[a-z_]+)`", section, re.M))
    assert tabled | {"vllm:lk_moe_pool_cover_dup_total"} == pool_exported()  # cover_dup shares cover_miss' row
    for name in ("ds4x-expert-pool.json", "ds4x-expert-pool.yaml"):
        assert name in section
