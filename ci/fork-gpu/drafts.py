"""Set draft acceptance: each draft a v2 speculator proposes (EAGLE, DFlash, DSpark)
is kept with the probability its token's group is given, else replaced by another
token drawn at random (d + r mod vocab, r in 1..vocab-1), so a right draft is rejected
and the rejected tokens of a step are as distinct as real wrong drafts: each routes to
its own experts, and a step costs what a real one does. Applied eagerly after propose(), outside
the drafter's own graph, and never while a graph is captured. Lossless under
greedy decoding, as any draft the target verifies (with temperature > 0 the
rejection sampler would weigh the swapped token by the drafter's probabilities).

With `chain` (the target's known greedy successor of every token), a draft after the
first is first set to the successor of the draft before it: the right token wherever the
draft before it is right, so acceptance is the one set also where a drafter's later
positions miss on random weights (DSpark's Markov-chained second draft). How often the
drafter's own later drafts already were that token is counted (`chain_agreement`).

Whether a draft is kept, and the token that replaces it, are drawn from the draft's own
position in its request and its token, through a hash salted by `salt` (the end-to-end
benchmark: the round), not from one stream: a draft of the same request at the same
position is kept under every policy or under none, whatever depths the policies verified
before it (common random numbers: policies paired in a round differ by what they verify,
not by their luck). The key holds no request identity: two requests with the same token at
the same position share a draw (the benchmark's start half a cycle apart). Without the
step's positions (a bare call) the draws come from a seeded stream."""

import torch

MASK_24 = (1 << 24) - 1


def first_positions(input_batch, attn_metadata, slot_mappings, last_hidden_states, aux_hidden_states, num_sampled,
                    num_rejected, *_, **__) -> torch.Tensor:
    """A speculator's propose() arguments -> [requests] the position of each request's first draft:
    the query ran to seq_len (the last sampled token and the drafts verified), the rejected drafts
    come off, and the bonus token takes the position after the last kept one."""
    n = input_batch.num_reqs
    return input_batch.seq_lens[:n].long() - num_rejected[:n].long() + 1


def mix(x: torch.Tensor) -> torch.Tensor:
    """A 64-bit integer mixer, elementwise: xorshift-multiply rounds (odd constants below 2^63, which
    torch's int64 takes; the product wraps), the shifts made logical."""
    for shift, factor in ((30, 0x5851F42D4C957F2D), (27, 0x14057B7EF767814F), (31, None)):
        x = x ^ ((x >> shift) & ((1 << (64 - shift)) - 1))
        if factor is not None:
            x = x * factor
    return x


class DraftFilter:
    def __init__(self, vocab: int, chain: list[int] | None = None) -> None:
        self.vocab = vocab  # the target's: replacements are embedded
        self.chain = chain
        self.active = False
        self._next: torch.Tensor | None = None
        self._checked, self._agreed = 0, None  # later drafts seen, and those equal to the chain's (on the device)
        self._keep: dict[tuple[int, ...], float] = {}
        self._default = 1.0
        self._table: torch.Tensor | None = None
        self._gen: torch.Generator | None = None
        self.salt = 0  # the draws' salt: a new one, new draws for the same positions

    def set(self, default: float = 1.0, groups: dict[tuple[int, ...], float] | None = None) -> None:
        """Keep probability of a draft: its token's group's, else `default`."""
        self._default, self._keep, self._table = default, dict(groups or {}), None

    def __call__(self, drafts: torch.Tensor, positions=None) -> torch.Tensor:
        """`positions`: None, or a callable giving [requests] each one's first draft's position."""
        if not self.active or (drafts.is_cuda and torch.cuda.is_current_stream_capturing()):
            return drafts
        if self._table is None:
            table = torch.full((self.vocab,), self._default)
            for tokens, keep in self._keep.items():
                table[list(tokens)] = keep
            self._table = table.to(drafts.device)
            self._gen = self._gen or torch.Generator(drafts.device).manual_seed(0)
        if self.chain is not None and drafts.dim() == 2 and drafts.shape[1] > 1:
            drafts = self._chained(drafts)
        if positions is None:
            draw = torch.rand(drafts.shape, device=drafts.device, generator=self._gen)
            shift = torch.randint(1, self.vocab, drafts.shape, device=drafts.device, generator=self._gen)
        else:
            draw, shift = self._keyed(drafts, positions())
        kept = draw < self._table[drafts.long()]
        return torch.where(kept, drafts, (drafts + shift.to(drafts.dtype)) % self.vocab)

    def _keyed(self, drafts: torch.Tensor, first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A uniform draw in [0, 1) and a shift in 1..vocab-1 for each draft, from its position
        (`first` [requests] plus its column), its token and the salt."""
        at = first.view(-1, 1) + torch.arange(drafts.shape[1], device=drafts.device)
        h = mix(mix(at ^ (self.salt << 40)) ^ drafts.long())
        draw = (h & MASK_24).float() / (1 << 24)
        shift = 1 + ((h >> 24) & MASK_24) % (self.vocab - 1)
        return draw, shift

    def _chained(self, drafts: torch.Tensor) -> torch.Tensor:
        """Each later draft the successor of the one before; counts the drafter's own agreeing."""
        if self._next is None:
            self._next = torch.tensor(self.chain, device=drafts.device, dtype=torch.long)
        columns = [drafts[:, 0]]
        for _ in range(1, drafts.shape[1]):
            columns.append(self._next[columns[-1].long()].to(drafts.dtype))
        chained = torch.stack(columns, dim=1)
        agreed = (chained[:, 1:] == drafts[:, 1:]).sum()  # stays on the device: no sync in the step
        self._agreed = agreed if self._agreed is None else self._agreed + agreed
        self._checked += drafts[:, 1:].numel()
        return chained

    def chain_agreement(self) -> dict[str, int]:
        """Later drafts chained, and how many the drafter had already drafted as the chain's."""
        return {"checked": self._checked, "agreed": int(self._agreed) if self._agreed is not None else 0}

    def install(self) -> None:
        """Wrap every speculator model runner v2 makes."""
        from vllm.v1.worker.gpu import model_runner as MR

        make = MR.init_speculator

        def init_speculator(*a, **k):
            speculator = make(*a, **k)
            propose = speculator.propose
            speculator.propose = lambda *pa, **pk: self(propose(*pa, **pk), lambda: first_positions(*pa, **pk))
            return speculator

        MR.init_speculator = init_speculator
