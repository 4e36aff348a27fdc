"""ci/fork-gpu/drafts.py's filter on CPU tensors: kept drafts stay, rejected ones change,
and with a chain every later draft becomes the successor of the one before it, the
drafter's own agreeing ones counted; with the step's positions a draft's fate is its
position's and token's, whatever else the batch or earlier steps held."""

from types import SimpleNamespace
from typing import Any

import torch

from tests.scripts import load_script

drafts = load_script("ci/fork-gpu/drafts.py")
VOCAB = 16
NEXT = [(t + 1) % VOCAB for t in range(VOCAB)]  # a cycle through every token


def test_kept_drafts_stay_and_rejected_ones_change() -> None:
    f = drafts.DraftFilter(VOCAB)
    f.active = True
    proposed = torch.tensor([[3, 4], [7, 8]])
    f.set(default=1.0)
    assert torch.equal(f(proposed), proposed)
    f.set(default=0.0)
    assert not torch.equal(f(proposed), proposed) and bool((f(proposed) != proposed).all())


def test_a_chain_makes_later_drafts_the_successor_and_counts_the_drafters_own() -> None:
    f = drafts.DraftFilter(VOCAB, chain=NEXT)
    f.active = True
    proposed = torch.tensor([[3, 4, 9], [7, 2, 3], [15, 0, 1]])  # row 2 misses at position 1
    assert f(proposed).tolist() == [[3, 4, 5], [7, 8, 9], [15, 0, 1]]
    assert f.chain_agreement() == {"checked": 6, "agreed": 3}


def test_one_draft_a_request_is_left_to_the_drafter() -> None:
    f = drafts.DraftFilter(VOCAB, chain=NEXT)
    f.active = True
    assert f(torch.tensor([[3], [9]])).tolist() == [[3], [9]]
    assert f.chain_agreement() == {"checked": 0, "agreed": 0}


def keyed(keep: float, salt: int = 0) -> Any:
    f = drafts.DraftFilter(1000)
    f.active, f.salt = True, salt
    f.set(default=keep)
    return f


def test_a_draft_at_a_position_meets_the_same_fate_in_any_batch_and_after_any_steps() -> None:
    proposed = torch.randint(0, 1000, (64, 2), generator=torch.Generator().manual_seed(1))
    first = torch.arange(64) * 5
    f = keyed(0.5)
    whole = f(proposed, lambda: first)
    f(torch.randint(0, 1000, (7, 3)), lambda: torch.arange(7))  # other steps in between draw nothing of theirs
    part = f(proposed[10:20], lambda: first[10:20])
    assert torch.equal(part, whole[10:20])
    assert torch.equal(keyed(0.5)(proposed, lambda: first), whole)  # a fresh filter: the same draws
    assert not torch.equal(keyed(0.5, salt=1)(proposed, lambda: first), whole)  # another round: others


def test_a_position_drafted_first_in_one_step_and_second_in_another_meets_the_same_fate() -> None:
    """Policies at other depths draft a position from another column: its fate stays its own."""
    f = keyed(0.5)
    tokens = torch.randint(0, 1000, (200,), generator=torch.Generator().manual_seed(3))
    as_second = f(torch.stack([tokens[:-1], tokens[1:]], 1), lambda: torch.arange(199))  # i drafts i and i + 1
    as_first = f(tokens[1:].view(-1, 1), lambda: torch.arange(1, 200))  # the same positions i + 1 alone
    assert torch.equal(as_second[:, 1], as_first[:, 0])


def test_keyed_draws_keep_the_set_share_and_replace_with_another_token() -> None:
    proposed = torch.randint(0, 1000, (20000, 2), generator=torch.Generator().manual_seed(2))
    out = keyed(0.3)(proposed, lambda: torch.arange(20000) * 2)
    kept = out == proposed
    assert abs(kept.float().mean().item() - 0.3) < 0.01
    assert abs(kept[:, 1].float().mean().item() - 0.3) < 0.02  # each column on its own
    assert bool(((out >= 0) & (out < 1000)).all())


def test_the_first_draft_follows_the_last_kept_token() -> None:
    """The query's last row sits at seq_len - 1 (0-based); a step that rejected r drafts puts its
    bonus token at seq_len - r, and the next first draft right after it."""
    batch = SimpleNamespace(num_reqs=2, seq_lens=torch.tensor([12, 30, 0]))  # padded past num_reqs
    rejected = torch.tensor([2, 0, 0])
    got = drafts.first_positions(batch, None, None, None, None, torch.tensor([1, 3]), rejected, "more", key="word")
    assert got.tolist() == [11, 31]
    by_name = drafts.first_positions(input_batch=batch, attn_metadata=None, slot_mappings=None, last_hidden_states=None,
                                     aux_hidden_states=None, num_sampled=None, num_rejected=rejected, dummy_run=True)
    assert by_name.tolist() == [11, 31]  # the model runner's dummy run passes them by name
