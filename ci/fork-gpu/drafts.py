"""Set draft acceptance: each draft a v2 speculator proposes (EAGLE, DFlash, DSpark)
is kept with the probability its token's group is given, else replaced by another
token drawn at random (d + r mod vocab, r in 1..vocab-1), so a right draft is rejected
and the rejected tokens of a step are as distinct as real wrong drafts: each routes to
its own experts, and a step costs what a real one does. Applied eagerly after propose(), outside
the drafter's own graph, and never while a graph is captured. Lossless under
greedy decoding, as any draft the target verifies (with temperature > 0 the
rejection sampler would weigh the swapped token by the drafter's probabilities)."""

import torch


class DraftFilter:
    def __init__(self, vocab: int) -> None:
        self.vocab = vocab  # the target's: replacements are embedded
        self.active = False
        self._keep: dict[tuple[int, ...], float] = {}
        self._default = 1.0
        self._table: torch.Tensor | None = None
        self._gen: torch.Generator | None = None

    def set(self, default: float = 1.0, groups: dict[tuple[int, ...], float] | None = None) -> None:
        """Keep probability of a draft: its token's group's, else `default`."""
        self._default, self._keep, self._table = default, dict(groups or {}), None

    def __call__(self, drafts: torch.Tensor) -> torch.Tensor:
        if not self.active or torch.cuda.is_current_stream_capturing():
            return drafts
        if self._table is None:
            table = torch.full((self.vocab,), self._default)
            for tokens, keep in self._keep.items():
                table[list(tokens)] = keep
            self._table = table.to(drafts.device)
            self._gen = self._gen or torch.Generator(drafts.device).manual_seed(0)
        kept = torch.rand(drafts.shape, device=drafts.device, generator=self._gen) < self._table[drafts.long()]
        shift = torch.randint(1, self.vocab, drafts.shape, device=drafts.device, generator=self._gen, dtype=drafts.dtype)
        return torch.where(kept, drafts, (drafts + shift) % self.vocab)

    def install(self) -> None:
        """Wrap every speculator model runner v2 makes."""
        from vllm.v1.worker.gpu import model_runner as MR

        make = MR.init_speculator

        def init_speculator(*a, **k):
            speculator = make(*a, **k)
            propose = speculator.propose
            speculator.propose = lambda *pa, **pk: self(propose(*pa, **pk))
            return speculator

        MR.init_speculator = init_speculator
