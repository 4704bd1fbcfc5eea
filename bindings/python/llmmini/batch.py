"""Batch: several prompts generating together in one context, one llmm_decode_sample per step.

Built on Context's public calls only (prefill, logits, decode_sample) and Sampler; a Context
hands itself in (Context.generate_batch), so this module imports no Context."""
from __future__ import annotations

import codecs
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .errors import ContextFullError, invalid_arg
from .sampler import Sampler


class Batch(Iterator[Tuple[int, str]]):
    """The pieces of several generations as they are produced, as (prompt index, piece)
    (see Context.generate_batch).

    Attributes: texts, tokens (generated ids, EOS excluded) and stop_reasons (None while that
    sequence runs; "eos", "max_tokens", "context_full", or "callback" when close() stopped
    it) per prompt; seqs, the sequence each prompt runs in.
    """

    def __init__(self, ctx: Any, prompts: Sequence[Union[str, bytes]], *, max_tokens: int,
                 sampling: Dict[str, Any], seqs: Optional[Sequence[int]], add_special: bool,
                 parse_special: bool) -> None:
        if isinstance(prompts, (str, bytes)) or not prompts:
            raise invalid_arg("generate_batch takes a non-empty list of prompts")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise invalid_arg(f"max_tokens must be an int >= 0, not {max_tokens!r}")
        n = len(prompts)
        self.seqs: List[int] = list(range(n)) if seqs is None else list(seqs)
        if len(self.seqs) != n or len(set(self.seqs)) != n:
            raise invalid_arg(f"generate_batch: {n} prompts need {n} distinct sequences, not {self.seqs}")
        self._ctx = ctx
        self._max_tokens = max_tokens
        model = ctx.model
        self._eos = {t for t in (model.special_token("eos"), model.special_token("eot")) if t is not None}
        seed = sampling.pop("seed", None) or 0
        self._samplers = [Sampler(seed=(seed + i) % (1 << 64), **sampling) for i in range(n)]
        self._prompt_ids = [model.tokenize(p, add_special=add_special, parse_special=parse_special) for p in prompts]
        self._decoders = [codecs.getincrementaldecoder("utf-8")("replace") for _ in range(n)]
        self.texts = [""] * n
        self.tokens: List[List[int]] = [[] for _ in range(n)]
        self.stop_reasons: List[Optional[str]] = [None] * n
        self._next: List[Optional[int]] = [None] * n  # the token chosen and not yet decoded
        self._ready: List[Tuple[int, str]] = []
        self._started = False

    def __iter__(self) -> "Batch":
        return self

    def __next__(self) -> Tuple[int, str]:
        while not self._ready:
            if not self._step():
                raise StopIteration
        return self._ready.pop(0)

    def _step(self) -> bool:
        """One round: the prompts' prefill at first, then one decode_sample over the running
        sequences. False once every sequence stopped."""
        if not self._started:
            self._started = True
            for i, ids in enumerate(self._prompt_ids):
                self._ctx.clear(self.seqs[i])
                self._ctx.prefill(ids, seq=self.seqs[i])
                self._choose(i, self._samplers[i].sample(self._ctx.logits(0)))
            return True
        running = [i for i in range(len(self.seqs)) if self.stop_reasons[i] is None]
        if not running:
            return False
        try:
            out = self._ctx.decode_sample([self._next[i] for i in running], [self._samplers[i] for i in running],
                                          seqs=[self.seqs[i] for i in running])
        except ContextFullError:
            for i in running:
                self._finish(i, "context_full")
            return True
        for i, token in zip(running, out):
            self._choose(i, token)
        return True

    def _choose(self, i: int, token: int) -> None:
        """Sequence i's sampler chose token: accept it, then stop or emit its text."""
        if self._max_tokens == 0:
            self._finish(i, "max_tokens")
            return
        if token in self._eos:
            self._finish(i, "eos")
            return
        self._samplers[i].accept(token)
        self.tokens[i].append(token)
        piece = self._decoders[i].decode(self._ctx.model.token_to_piece(token))
        if piece:
            self.texts[i] += piece
            self._ready.append((i, piece))
        if len(self.tokens[i]) >= self._max_tokens:
            self._finish(i, "max_tokens")
        else:
            self._next[i] = token

    def _finish(self, i: int, reason: str) -> None:
        self.stop_reasons[i] = reason
        tail = self._decoders[i].decode(b"", final=True)
        if tail:
            self.texts[i] += tail
            self._ready.append((i, tail))
        self._samplers[i].close()

    def close(self) -> None:
        """Stop every sequence still running (idempotent); their texts stay as they are."""
        for i, reason in enumerate(self.stop_reasons):
            if reason is None:
                self._finish(i, "callback")
        self._ready.clear()

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["Batch"]
