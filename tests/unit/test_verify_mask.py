"""vllm_ds4x.hooks.verify_mask (the fork's model runner half of per-request verify depths) on CPU tensors:
the static row mask a step marks, the tokens each request keeps, and the marks a later step clears,
whatever the order of batch sizes. Imported by name (it needs torch and numpy, not vLLM)."""

from __future__ import annotations

import importlib
from collections.abc import Generator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="ci/test installs torch; the mask is a torch tensor")

ROOT = Path(__file__).resolve().parents[2]
K = 2


@pytest.fixture
def vm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from loaded(monkeypatch, "eagle")


@pytest.fixture
def dspark(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from loaded(monkeypatch, "dspark")


def loaded(monkeypatch: pytest.MonkeyPatch, method: str, verify: str = "request") -> Generator[Any, None, None]:
    from vllm_ds4x.hooks import verify_mask

    module = importlib.reload(verify_mask)  # fresh state: enable() sets it once per engine
    config = SimpleNamespace(speculative_config=SimpleNamespace(
        method=method, num_speculative_tokens=K,
        draft_depth={"policy": "phase", "reasoning_depth": 0, "verify": verify}))
    module.enable(config, 16, torch.device("cpu"))
    yield module


def step(vm: Any, depths: dict[str, int] | None, req_ids: list[str], drafts: list[int]) -> list[int] | None:
    ends = np.cumsum([0, *(1 + d for d in drafts)]).astype(np.int32)
    kept = vm.prepare(depths, req_ids, np.asarray(drafts, dtype=np.int32), ends, 1, torch.device("cpu"))
    return None if kept is None else kept.tolist()


def marked(vm: Any) -> list[int]:
    return [i for i, on in enumerate(vm._rows.tolist()) if on]


def test_a_step_marks_the_rows_past_each_request_s_own_depth(vm: Any) -> None:
    # r: rows 0-2 (its last token, drafts at 1, 2), a: rows 3-5; r verifies 0 drafts
    assert step(vm, {"r": 0}, ["r", "a"], [2, 2]) == [1, 3]
    assert marked(vm) == [1, 2]
    ids = torch.arange(12, dtype=torch.int32).reshape(6, 2)
    routed = vm.masked_ids(SimpleNamespace(ds4x_draft_layer=False), ids, lambda: 0)
    assert routed[1:3].tolist() == [[-1, -1], [-1, -1]] and torch.equal(routed[[0, 3, 4, 5]], ids[[0, 3, 4, 5]])
    drafter = vm.masked_ids(SimpleNamespace(ds4x_draft_layer=True), ids, lambda: 0)
    assert torch.equal(drafter, ids)  # a draft layer's rows are the drafter's
    second = vm.masked_ids(SimpleNamespace(ds4x_draft_layer=False), ids[3:], lambda: 3)
    assert torch.equal(second, ids[3:])  # a micro-batch reads the mask at its own row offset


def test_a_later_step_clears_the_marks_before_it(vm: Any) -> None:
    step(vm, {"r1": 0, "r2": 1}, ["a", "r1", "r2"], [2, 2, 2])  # rows 4-5 and 8
    assert marked(vm) == [4, 5, 8]
    assert step(vm, {"r": 1}, ["r"], [2]) == [2]  # a smaller batch: row 2 only, the rows past it cleared
    assert marked(vm) == [2]
    assert step(vm, None, ["a"], [2]) is None and marked(vm) == []
    assert step(vm, {"x": 0}, ["a", "b"], [2, 2]) is None and marked(vm) == []  # no request of this batch is capped


def test_dspark_rests_whole_when_every_request_of_the_step_rests(dspark: Any) -> None:
    dspark.prepare_drafter(frozenset({"r1", "r2"}), ["r1", "r2"])
    assert dspark.drafter_rests() and not dspark._draft_rows.any()  # no block run: no row to mask
    dspark.prepare_drafter(frozenset({"r1", "r2"}), ["r1", "r2", "a"])
    assert not dspark.drafter_rests()
    dspark.prepare_drafter(None, ["r1"])
    assert not dspark.drafter_rests()


def test_dspark_s_own_layers_skip_the_query_rows_of_resting_requests(dspark: Any) -> None:
    # DSpark's block: K rows a request, in batch order; "r" (second) rests beside "a"
    dspark.prepare_drafter(frozenset({"r"}), ["a", "r"])
    ids = torch.arange(8, dtype=torch.int32).reshape(4, 2)
    drafter = dspark.masked_ids(SimpleNamespace(ds4x_draft_layer=True), ids, lambda: 0)
    assert drafter[2:].tolist() == [[-1, -1], [-1, -1]] and torch.equal(drafter[:2], ids[:2])
    target = dspark.masked_ids(SimpleNamespace(ds4x_draft_layer=False), ids, lambda: 0)
    assert torch.equal(target, ids)  # the target's rows follow the verify depths, none capped here
    dspark.prepare_drafter(frozenset({"r"}), ["r"])  # it rests whole: the last step's marks cleared
    assert dspark.drafter_rests() and not dspark._draft_rows.any()


def test_other_drafters_never_rest(vm: Any) -> None:
    vm.prepare_drafter(frozenset({"r"}), ["r"])
    assert not vm.drafter_rests() and vm._draft_rows is None


def test_a_batch_of_one_depth_masks_no_row_of_dspark(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = loaded(monkeypatch, "dspark", verify="batch")
    module = next(batch)
    module.prepare_drafter(frozenset({"r"}), ["r"])
    assert module.drafter_rests() and module._draft_rows is None
    ids = torch.arange(4, dtype=torch.int32).reshape(2, 2)
    assert torch.equal(module.masked_ids(SimpleNamespace(ds4x_draft_layer=True), ids, lambda: 0), ids)
    batch.close()
