"""Two micro-batches' attention metadata (#20 item 2) are views of the step's own buffers,
so a FULL decode graph captured with them reads the values written before each replay.

The module under test is the hook itself (it imports torch at its top); its metadata class stand-in has CommonAttentionMetadata's fields
(vllm/v1/attention/backend.py at the pin)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="ci/test installs torch; the views are torch tensors")

from vllm_ds4x.hooks import ubatch_overlap as ub  # noqa: E402
from vllm_ds4x.moe import overlap_plan as op  # noqa: E402


def halves(num_reqs: int, q: int) -> tuple[op.MicroBatch, op.MicroBatch]:
    """split_uniform's two micro-batches, where there must be two."""
    split = op.split_uniform(num_reqs, q)
    assert split is not None
    return split


def same_storage(view: Any, base: Any) -> bool:
    """Whether a view lies inside base's memory: what a graph needs of it."""
    start: int = base.data_ptr()
    end = start + base.numel() * base.element_size()
    first: int = view.data_ptr()
    return start <= first and first + view.numel() * view.element_size() <= end


@dataclasses.dataclass
class Common:  # CommonAttentionMetadata's fields, as the fork has them
    query_start_loc: Any
    query_start_loc_cpu: Any
    seq_lens: Any
    num_reqs: int
    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    block_table_tensor: Any
    slot_mapping: Any
    causal: bool = True
    logits_indices_padded: Any = None
    num_logits_indices: Any = None
    encoder_seq_lens: Any = None
    encoder_seq_lens_cpu: Any = None
    dcp_local_seq_lens: Any = None
    dcp_local_seq_lens_cpu: Any = None
    positions: Any = None
    is_prefilling: Any = None
    seq_lens_cpu_upper_bound: Any = None
    mm_req_doc_ranges: Any = None
    _seq_lens_cpu: Any = None
    _num_computed_tokens_cpu: Any = None
    _num_computed_tokens_cache: Any = None


def batch(num_reqs: int, q: int, max_reqs: int = 4) -> tuple[Common, dict[str, Any]]:
    """A uniform decode batch over persistent buffers sized for max_reqs, as v2 keeps them."""
    buffers = {"qsl": torch.arange(0, (max_reqs + 1) * q, q, dtype=torch.int32),
               "seq_lens": torch.tensor([100, 200, 300, 400][:max_reqs], dtype=torch.int32),
               "block_table": torch.arange(max_reqs * 8, dtype=torch.int32).view(max_reqs, 8),
               "slots": torch.arange(1000, 1000 + max_reqs * q, dtype=torch.int64),
               "positions": torch.arange(max_reqs * q, dtype=torch.int64)}
    n, t = num_reqs, num_reqs * q
    common = Common(query_start_loc=buffers["qsl"][:n + 1], query_start_loc_cpu=buffers["qsl"][:n + 1].clone(),
                    seq_lens=buffers["seq_lens"][:n], num_reqs=n, num_actual_tokens=t, max_query_len=q,
                    max_seq_len=400, block_table_tensor=buffers["block_table"][:n], slot_mapping=buffers["slots"][:t],
                    positions=buffers["positions"][:t], seq_lens_cpu_upper_bound=buffers["seq_lens"][:n].clone())
    return common, buffers


@pytest.mark.parametrize(("num_reqs", "q"), [(2, 1), (2, 2), (2, 3), (3, 3), (4, 2)])
def test_each_micro_batch_is_views_with_its_own_counts(num_reqs: int, q: int) -> None:
    common, buffers = batch(num_reqs, q)
    for micro in halves(num_reqs, q):
        m = ub.micro_batch_metadata(common, micro, q)
        assert (m.num_reqs, m.num_actual_tokens, m.max_query_len, m.max_seq_len) == (
            micro.num_reqs, micro.num_reqs * q, q, 400)
        assert m.query_start_loc.tolist() == [i * q for i in range(micro.num_reqs + 1)]
        assert m.seq_lens.tolist() == buffers["seq_lens"][micro.req_start:micro.req_stop].tolist()
        assert m.block_table_tensor.tolist() == buffers["block_table"][micro.req_start:micro.req_stop].tolist()
        assert m.slot_mapping.tolist() == list(range(1000 + micro.tok_start, 1000 + micro.tok_stop))
        assert m.positions.tolist() == list(range(micro.tok_start, micro.tok_stop))
        for name, base in (("query_start_loc", "qsl"), ("seq_lens", "seq_lens"),
                           ("block_table_tensor", "block_table"), ("slot_mapping", "slots"), ("positions", "positions")):
            assert same_storage(getattr(m, name), buffers[base]), name


def test_a_write_before_replay_shows_through_the_views() -> None:
    """What a replay relies on: the runner rewrites the persistent buffers in place."""
    common, buffers = batch(2, 3)
    second = ub.micro_batch_metadata(common, halves(2, 3)[1], 3)
    buffers["seq_lens"][1] = 777
    buffers["slots"][3:6] = torch.tensor([5, 6, 7])
    assert second.seq_lens.tolist() == [777]
    assert second.slot_mapping.tolist() == [5, 6, 7]


def test_micro_batch_rows_are_views() -> None:
    hidden = torch.zeros(6, 4)
    _, b = halves(2, 3)
    ub.micro_batch_rows(hidden, b).fill_(1)
    assert hidden[:3].sum() == 0 and hidden[3:].sum() == 12
    assert not same_storage(torch.zeros(3, 4), hidden)


def test_a_batch_with_prefill_only_fields_is_refused() -> None:
    common, _ = batch(2, 1)
    common.logits_indices_padded = torch.zeros(2)
    with pytest.raises(ValueError, match="logits_indices_padded is set"):
        ub.micro_batch_metadata(common, halves(2, 1)[0], 1)


@pytest.mark.parametrize(("num_reqs", "real", "q"), [(2, 2, 3), (3, 3, 1), (4, 4, 2), (4, 3, 2), (4, 2, 3)])
def test_the_second_micro_batch_query_start_is_rebased_in_place(num_reqs: int, real: int, q: int) -> None:
    """Padded requests (v2 writes num_tokens past the real ones) keep no query in the second
    micro-batch, and the buffer the graph captured is the one rewritten."""
    qsl = torch.tensor([min(i, real) * q for i in range(num_reqs + 1)], dtype=torch.int32)
    _, second = halves(num_reqs, q)
    out = torch.full((8,), -1, dtype=torch.int32)
    view = ub.rebase_query_start(qsl, second, out)
    expect = [max(0, min(i, real) - second.req_start) * q for i in range(second.req_start, num_reqs + 1)]
    assert view.tolist() == expect
    assert same_storage(view, out) and out[len(expect):].tolist() == [-1] * (8 - len(expect))


def test_a_query_start_buffer_too_small_is_refused() -> None:
    _, second = halves(4, 1)
    with pytest.raises(ValueError, match=r"requests \[2, 4\) do not fit"):
        ub.rebase_query_start(torch.arange(5, dtype=torch.int32), second, torch.zeros(2, dtype=torch.int32))


def test_model_inputs_are_cut_to_the_micro_batch() -> None:
    _, b = halves(3, 2)
    inputs = {"input_ids": torch.arange(6), "positions": torch.arange(12).view(2, 6), "inputs_embeds": None}
    cut = ub.micro_batch_inputs(inputs, b)
    assert cut["input_ids"].tolist() == [4, 5] and cut["positions"].tolist() == [[4, 5], [10, 11]]
    assert cut["inputs_embeds"] is None and same_storage(cut["input_ids"], inputs["input_ids"])


def test_outputs_join_in_token_order() -> None:
    a, b = torch.zeros(4, 2), torch.ones(2, 2)
    assert ub.join_outputs([a, b]).tolist() == [[0, 0]] * 4 + [[1, 1]] * 2
    hidden, aux = ub.join_outputs([(a, [a + 2, a + 3]), (b, [b + 2, b + 3])])
    assert hidden.shape == (6, 2) and [x[:, 0].tolist() for x in aux] == [[2] * 4 + [3] * 2, [3] * 4 + [4] * 2]
    with pytest.raises(TypeError, match="cannot join"):
        ub.join_outputs([a, (b, [])])
