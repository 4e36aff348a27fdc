"""Through the OpenAI-compatible server, streaming: reasoning and answer deltas,
the phase split in /metrics, and a per-request depth that is refused by name."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.depth_client import by_phase, scrape, stream_chat
from bench.serve import served

pytestmark = [pytest.mark.network, pytest.mark.slow]
SPEC = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3, "prompt_lookup_min": 1,
        "draft_depth": {"policy": "phase"}}
PROMPT = "def add(a, b): return a + b. def add(a, b): return a + b. def add(a, b):"


@pytest.fixture(scope="module")
def server(engine_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("server") / "server.log"
    with served(engine_python, tiny_model, SPEC, log, eager=True) as url:
        yield url


def test_streamed_phases_and_their_depths(server: str) -> None:
    before = scrape(server)
    thinking = stream_chat(server, "tiny", PROMPT, max_tokens=48)
    answering = stream_chat(server, "tiny", PROMPT, max_tokens=48,
                            extra={"chat_template_kwargs": {"enable_thinking": False}})
    # the random model never closes <think>: all reasoning; with thinking off, all answer
    assert (thinking.phases["reasoning"].tokens, thinking.phases["answer"].tokens) == (48, 0)
    assert (answering.phases["reasoning"].tokens, answering.phases["answer"].tokens) == (0, 48)
    split = by_phase(before, scrape(server))
    assert split["reasoning"]["drafts"] > 0 and split["reasoning"]["mean_depth"] == 1.0
    assert split["answer"]["drafts"] > 0 and split["answer"]["mean_depth"] > 1.0


def test_bad_request_depth_is_refused_by_name(server: str) -> None:
    with pytest.raises(RuntimeError, match=r"extra_args.draft_depth=5: expected an integer in 0..2"):
        stream_chat(server, "tiny", PROMPT, max_tokens=4, extra={"vllm_xargs": {"draft_depth": 5}})


def test_every_dashboard_metric_is_served(server: str) -> None:
    """The Grafana and Perses dashboards ask only for metrics this server exports."""
    import urllib.request

    from tests.unit.test_dashboards import METRIC, queries

    root = server.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/metrics", timeout=30) as response:
        exported = set(re.findall(r"^(vllm:[a-z_]+)", response.read().decode(), re.M))
    asked = {name for query in queries() for name in METRIC.findall(query)}
    assert asked and asked <= exported, sorted(asked - exported)
