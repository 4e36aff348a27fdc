"""vllm_ds4x.hooks.moe_prefill: the fork's GPU prefill on lk_moe 2.7 goes through lk_moe's own drivers
(whose C++ gpu_prefill writes fp32, where the fork allocated bf16), the layer gets a bf16 copy of its
own, lk_moe 2.3 keeps the fork's call, and the triton engine's config fields are set before the build.
lk_moe itself is faked: its drivers need a GPU."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch

from vllm_ds4x.hooks import moe_prefill
from vllm_ds4x.moe.placement import PlacementError
from vllm_ds4x.moe.prefill import PrefillSettings

H = 8


class Stream:
    cuda_stream = 1234

    def __init__(self) -> None:
        self.waited: list[Any] = []

    def wait_event(self, event: Any) -> None:
        self.waited.append(event)


class Driver:
    """lk_moe 2.7's CutlassPrefill as the fork meets it: one shared fp32 buffer for every layer."""

    shared = torch.zeros(16, H, dtype=torch.float32)
    made: ClassVar[list[Any]] = []
    refuse = False

    @classmethod
    def probe(cls, moe: Any) -> Driver | None:
        cls.made.append(moe)
        return None if cls.refuse else cls()

    def prefill_gpu(self, hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> tuple[str, torch.Tensor]:
        out = Driver.shared[: hidden.size(0)]
        out.copy_(hidden.float() * 2 + weights.sum(1, keepdim=True))
        return "event", out


@pytest.fixture
def lk_moe_27(monkeypatch: pytest.MonkeyPatch) -> type[Driver]:
    monkeypatch.setitem(sys.modules, "lk_moe.prefill_cutlass", SimpleNamespace(CutlassPrefill=Driver))
    monkeypatch.setitem(sys.modules, "lk_moe.prefill_staging", SimpleNamespace(StagingPrefill=Driver))
    monkeypatch.delenv(moe_prefill.ENGINE_ENV, raising=False)
    monkeypatch.setattr(Driver, "made", [])
    monkeypatch.setattr(Driver, "refuse", False)
    moe_prefill.CALLS.clear()
    return Driver


def layer(name: str = "model.layers.2.ffn.experts") -> SimpleNamespace:
    return SimpleNamespace(layer_name=name, lk_moe=SimpleNamespace(calls=[]))


def batch(rows: int = 5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    hidden = torch.randn(rows, H).bfloat16()
    return hidden, torch.full((rows, 6), 1 / 6), torch.zeros(rows, 6, dtype=torch.int32)


def test_on_lk_moe_27_the_drivers_fp32_result_comes_back_as_the_layers_own_bf16_copy(lk_moe_27: type[Driver]) -> None:
    experts, stream = layer(), Stream()
    hidden, weights, ids = batch()
    out = moe_prefill.gpu_prefill(experts, hidden, weights, ids, stream)
    assert out.dtype == torch.bfloat16 and out.shape == hidden.shape
    assert torch.equal(out, (hidden.float() * 2 + 1).bfloat16())
    assert out.data_ptr() != Driver.shared.data_ptr()  # the next layer's call reuses the shared buffer
    Driver.shared.zero_()
    assert torch.equal(out, (hidden.float() * 2 + 1).bfloat16())
    assert stream.waited == ["event"] and moe_prefill.CALLS == {"cutlass": 1}
    moe_prefill.gpu_prefill(experts, *batch(3), stream)
    assert lk_moe_27.made == [experts.lk_moe] and moe_prefill.CALLS == {"cutlass": 2}  # one driver a layer


def test_the_engine_variable_picks_the_driver_and_refuses_other_names(lk_moe_27: type[Driver],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(moe_prefill.ENGINE_ENV, "Triton")
    moe_prefill.gpu_prefill(layer(), *batch(), Stream())
    assert moe_prefill.CALLS == {"triton": 1}
    assert moe_prefill.engine_name({}) == "cutlass" == moe_prefill.engine_name({moe_prefill.ENGINE_ENV: " "})
    with pytest.raises(PlacementError, match="LK_GPU_PREFILL_ENGINE='marlin': expected cutlass"):
        moe_prefill.engine_name({moe_prefill.ENGINE_ENV: "marlin"})


def test_a_driver_lk_moe_cannot_make_fails_the_call_instead_of_falling_back(lk_moe_27: type[Driver]) -> None:
    lk_moe_27.refuse = True
    with pytest.raises(RuntimeError, match=r"model.layers.2.ffn.experts: lk_moe's cutlass GPU prefill did not start"):
        moe_prefill.gpu_prefill(layer(), *batch(), Stream())


def test_on_lk_moe_23_the_forks_own_call_writes_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lk_moe.prefill_cutlass", None)  # 2.3 ships no driver: ImportError
    monkeypatch.delenv(moe_prefill.ENGINE_ENV, raising=False)
    moe_prefill.CALLS.clear()
    experts = layer()
    experts.lk_moe.gpu_prefill = lambda *a: experts.lk_moe.calls.append(a)
    hidden, weights, ids = batch(4)
    out = moe_prefill.gpu_prefill(experts, hidden, weights, ids, Stream())
    (call,) = experts.lk_moe.calls
    assert out.dtype == torch.bfloat16 and call[1] == out.data_ptr() and call[4:] == (4, 6, Stream.cuda_stream)
    assert moe_prefill.CALLS == {"fork": 1} and experts.ds4x_prefill is None
    monkeypatch.setenv(moe_prefill.ENGINE_ENV, "triton")
    monkeypatch.setitem(sys.modules, "lk_moe.prefill_staging", None)
    with pytest.raises(PlacementError, match="no lk_moe.prefill_staging"):
        moe_prefill.gpu_prefill(layer(), hidden, weights, ids, Stream())


def cfg(**fields: Any) -> SimpleNamespace:
    """MOEConfigV2's fields as 2.7.4 defaults them (those configure touches)."""
    return SimpleNamespace(**{"use_gpu_prefill": True, "prefill_gpu": False, "layer_id": 0, "role_draft": False,
                              "prefill_window": 1, "prefill_min_tokens": 0, **fields})


def test_configure_sets_the_triton_tiers_fields_only_for_triton_with_gpu_prefill_on() -> None:
    triton = {moe_prefill.ENGINE_ENV: "triton"}
    for c, env in ((cfg(), {}), (cfg(use_gpu_prefill=False), triton), (cfg(), {moe_prefill.ENGINE_ENV: "cutlass"})):
        before = dict(vars(c))
        moe_prefill.configure(c, "model.layers.2.ffn.experts", False, env)
        assert vars(c) == before
    c = cfg()
    moe_prefill.configure(c, "model.layers.3.ffn.experts", True, {**triton, "LVLLM_GPU_PREFILL_MIN_BATCH_SIZE": "1024"})
    assert (c.prefill_gpu, c.layer_id, c.role_draft, c.prefill_window) == (True, 3, True, 2)  # window 3 (default) -> 2
    assert (c.use_gpu_prefill, c.prefill_min_tokens) == (False, 1024)  # one engine's VRAM: no cutlass arena
    c = cfg()
    moe_prefill.configure(c, "model.layers.1.ffn.experts", False, {**triton, "LVLLM_GPU_PREFETCH_WINDOW": "1"})
    assert (c.layer_id, c.role_draft, c.prefill_window) == (1, False, 1)
    with pytest.raises(PlacementError, match="LVLLM_GPU_PREFETCH_WINDOW"):
        moe_prefill.configure(cfg(), "model.layers.1.ffn.experts", False, {**triton, "LVLLM_GPU_PREFETCH_WINDOW": "x"})
    old = SimpleNamespace(use_gpu_prefill=True)  # lk_moe 2.3's config
    with pytest.raises(PlacementError, match="no Triton prefill tier"):
        moe_prefill.configure(old, "model.layers.1.ffn.experts", False, triton)
    assert [PrefillSettings(engine="triton", window=w).ring for w in (0, 1, 2, 3, 9)] == [1, 1, 2, 2, 2]


def test_gpu_prefill_beside_the_expert_pool_is_refused_before_the_build() -> None:
    pool = {"LK_POOL_SLOTS": "12", "LVLLM_GPU_PREFILL_MIN_BATCH_SIZE": "1024"}
    for env in (pool, {**pool, moe_prefill.ENGINE_ENV: "triton"}):
        with pytest.raises(PlacementError, match="LK_POOL_SLOTS=12 with GPU prefill"):
            moe_prefill.configure(cfg(), "model.layers.1.ffn.experts", False, env)
    moe_prefill.configure(cfg(use_gpu_prefill=False), "model.layers.1.ffn.experts", False, pool)  # CPU prefill: fine


def test_a_driver_that_fails_to_import_is_an_error_not_lk_moe_23(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a missing driver module means lk_moe 2.3: a 2.7 driver whose own import fails (a dependency
    missing) stops the call instead of taking the fork's raw call, which 2.7 would overrun in fp32."""
    def broken(name: str, *args: object) -> object:
        raise ModuleNotFoundError("No module named 'triton'", name="triton")

    monkeypatch.delenv(moe_prefill.ENGINE_ENV, raising=False)
    monkeypatch.setattr("importlib.import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="triton"):
        moe_prefill.gpu_prefill(layer(), *batch(), Stream())
