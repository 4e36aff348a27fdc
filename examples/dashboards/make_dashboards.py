#!/usr/bin/env python3
"""The ds4x dashboards, Grafana JSON and Perses YAML (the two vLLM ships for its
own metrics), each written from one list of panels so the two cannot drift:

    python examples/dashboards/make_dashboards.py     # rewrites grafana/ and perses/ here

- ds4x-draft-depth (PANELS): draft depth and acceptance by reasoning phase
  (vllm_ds4x/hooks/spec_metrics.py); every metric it names is one a served engine
  exports (tests/integration/test_server_depth.py).
- ds4x-expert-pool (POOL_PANELS): lk_moe's GPU expert pool, hit ratio and bytes
  pumped, all pooled layers together (vllm_ds4x/hooks/pool_metrics.py; exported only
  by an engine that runs the pool, so this one stays empty without it).

Queries use $__rate_interval (Grafana and Perses both fill it in)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
NAME, TITLE = "ds4x-draft-depth", "ds4x: draft depth by reasoning phase"
POOL_NAME, POOL_TITLE = "ds4x-expert-pool", "ds4x: lk_moe's GPU expert pool"
RATE = "rate({metric}[$__rate_interval])"


def by(labels: str, metric: str) -> str:
    return f"sum by ({labels}) ({RATE.format(metric=metric)})"


# (key, title, query, legend, unit)
PANELS = [
    ("acceptance", "Draft acceptance by phase",
     f"{by('phase', 'vllm:spec_decode_num_accepted_tokens_by_phase_total')} / "
     f"{by('phase', 'vllm:spec_decode_num_draft_tokens_by_phase_total')}", "{{phase}}", "percentunit"),
    ("drafted", "Drafts verified per request step, by phase (mean depth)",
     f"{by('phase', 'vllm:spec_decode_num_draft_tokens_by_phase_total')} / "
     f"{by('phase', 'vllm:spec_decode_num_drafts_by_phase_total')}", "{{phase}}", "none"),
    ("verified", "Request steps by verified depth (0: verified nothing)",
     by("depth", "vllm:spec_decode_num_drafts_by_depth_total"), "verified {{depth}}", "ops"),
    ("chosen", "Request steps by chosen depth (a batch verifies its deepest choice)",
     by("depth", "vllm:spec_decode_num_drafts_by_chosen_depth_total"), "chosen {{depth}}", "ops"),
    ("generation", "Generation tokens per second",
     f"sum({RATE.format(metric='vllm:generation_tokens_total')})", "tok/s", "none"),
]

POOL = "vllm:lk_moe_pool_{}_total"
POOL_PANELS = [
    ("hit_ratio", "Pool hit ratio, all pooled layers (lk_moe counts no layer apart)",
     f"{by('engine', POOL.format('hits'))} / ({by('engine', POOL.format('hits'))} + "
     f"{by('engine', POOL.format('misses'))})", "engine {{engine}}", "percentunit"),
    ("generation", "Generation tokens per second",
     f"sum by (engine) ({RATE.format(metric='vllm:generation_tokens_total')})", "engine {{engine}}", "none"),
    ("pumped_bytes", "Bytes pumped into the pool's slots per second (host to GPU)",
     by("engine", POOL.format("pumped_bytes")), "engine {{engine}}", "binBps"),
    ("pumps", "Experts pumped into the pool's slots per second",
     by("engine", POOL.format("pumps")), "engine {{engine}}", "ops"),
    ("cover", "Experts computed by neither half or by both (lk_moe's exactly-once checks: 0)",
     f"{by('engine', POOL.format('cover_miss'))} + {by('engine', POOL.format('cover_dup'))}",
     "engine {{engine}}", "ops"),
    ("device_memory", "VRAM lk_moe holds (slots, prefill arena, staging ring)",
     "sum by (engine) (vllm:lk_moe_device_memory_bytes)", "engine {{engine}}", "bytes"),
]
DASHBOARDS = {NAME: (TITLE, PANELS), POOL_NAME: (POOL_TITLE, POOL_PANELS)}


def grafana(name: str = NAME) -> dict[str, Any]:
    board, panel_list = DASHBOARDS[name]
    source = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    panels = [{"id": i + 1, "type": "timeseries", "title": title, "datasource": source,
               "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
               "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
               "targets": [{"datasource": source, "expr": query, "legendFormat": legend, "refId": "A"}]}
              for i, (_, title, query, legend, unit) in enumerate(panel_list)]
    return {"title": board, "uid": name, "tags": ["vllm", "ds4x"], "schemaVersion": 39, "time": {"from": "now-1h",
            "to": "now"}, "panels": panels,
            "templating": {"list": [{"name": "DS_PROMETHEUS", "type": "datasource", "query": "prometheus"}]}}


def perses(name: str = NAME) -> dict[str, Any]:
    board, panel_list = DASHBOARDS[name]
    source = {"kind": "PrometheusDatasource", "name": "prometheus"}
    panels = {key: {"kind": "Panel", "spec": {
        "display": {"name": title},
        "plugin": {"kind": "TimeSeriesChart", "spec": {}},
        "queries": [{"kind": "TimeSeriesQuery", "spec": {"plugin": {"kind": "PrometheusTimeSeriesQuery", "spec": {
            "datasource": source, "query": query, "seriesNameFormat": legend}}}}]}}
        for key, title, query, legend, _ in panel_list}
    items = [{"x": 12 * (i % 2), "y": 8 * (i // 2), "width": 12, "height": 8,
              "content": {"$ref": f"#/spec/panels/{key}"}} for i, (key, *_) in enumerate(panel_list)]
    return {"kind": "PersesDashboard", "metadata": {"name": name, "project": ""},
            "spec": {"display": {"name": board}, "panels": panels,
                     "layouts": [{"kind": "Grid", "spec": {"items": items}}]}}


def rendered() -> dict[Path, str]:
    files: dict[Path, str] = {}
    for name in DASHBOARDS:
        files[HERE / "grafana" / f"{name}.json"] = json.dumps(grafana(name), indent=2) + "\n"
        files[HERE / "perses" / f"{name}.yaml"] = yaml.safe_dump(perses(name), sort_keys=False, width=120)
    return files


if __name__ == "__main__":
    for path, text in rendered().items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path.relative_to(HERE))
