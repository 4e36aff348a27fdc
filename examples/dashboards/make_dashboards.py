#!/usr/bin/env python3
"""The draft-depth dashboards, Grafana JSON and Perses YAML (the two vLLM ships
for its own metrics), written from one list of panels so they cannot drift:

    python examples/dashboards/make_dashboards.py     # rewrites grafana/ and perses/ here

Queries use $__rate_interval (Grafana and Perses both fill it in); every metric
they name is one a served engine exports (tests/integration/test_server_depth.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
NAME, TITLE = "ds4x-draft-depth", "ds4x: draft depth by reasoning phase"
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


def grafana() -> dict[str, Any]:
    source = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    panels = [{"id": i + 1, "type": "timeseries", "title": title, "datasource": source,
               "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
               "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
               "targets": [{"datasource": source, "expr": query, "legendFormat": legend, "refId": "A"}]}
              for i, (_, title, query, legend, unit) in enumerate(PANELS)]
    return {"title": TITLE, "uid": NAME, "tags": ["vllm", "ds4x"], "schemaVersion": 39, "time": {"from": "now-1h",
            "to": "now"}, "panels": panels,
            "templating": {"list": [{"name": "DS_PROMETHEUS", "type": "datasource", "query": "prometheus"}]}}


def perses() -> dict[str, Any]:
    source = {"kind": "PrometheusDatasource", "name": "prometheus"}
    panels = {key: {"kind": "Panel", "spec": {
        "display": {"name": title},
        "plugin": {"kind": "TimeSeriesChart", "spec": {}},
        "queries": [{"kind": "TimeSeriesQuery", "spec": {"plugin": {"kind": "PrometheusTimeSeriesQuery", "spec": {
            "datasource": source, "query": query, "seriesNameFormat": legend}}}}]}}
        for key, title, query, legend, _ in PANELS}
    items = [{"x": 12 * (i % 2), "y": 8 * (i // 2), "width": 12, "height": 8,
              "content": {"$ref": f"#/spec/panels/{key}"}} for i, (key, *_) in enumerate(PANELS)]
    return {"kind": "PersesDashboard", "metadata": {"name": NAME, "project": ""},
            "spec": {"display": {"name": TITLE}, "panels": panels,
                     "layouts": [{"kind": "Grid", "spec": {"items": items}}]}}


def rendered() -> dict[Path, str]:
    return {HERE / "grafana" / f"{NAME}.json": json.dumps(grafana(), indent=2) + "\n",
            HERE / "perses" / f"{NAME}.yaml": yaml.safe_dump(perses(), sort_keys=False, width=120)}


if __name__ == "__main__":
    for path, text in rendered().items():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path.relative_to(HERE))
