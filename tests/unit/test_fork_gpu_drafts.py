"""ci/fork-gpu/drafts.py's filter on CPU tensors: kept drafts stay, rejected ones change,
and with a chain every later draft becomes the successor of the one before it, the
drafter's own agreeing ones counted."""

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
