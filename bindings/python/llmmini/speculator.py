"""Speculator: speculative decoding a round at a time (``llmm_speculator_*``), for apps that run
their own decode loop; ``Context.generate(draft_model=..., spec_ngram=...)`` does it all itself.

One round per sequence: ``propose`` guesses what follows (a draft model, prompt lookup, or
none: then the app brings its own guesses), ``verify`` runs the pending token and the guesses
of one or more sequences through the target in one forward step, and ``accept`` keeps the
longest acceptable prefix plus one token the target chose (greedy: exactly what plain decoding
gives; sampling: rejection sampling, which keeps the sampler's distribution)."""
from __future__ import annotations

import ctypes
import weakref
from typing import Any, Callable, List, Mapping, Optional, Sequence, Tuple

from . import _lib
from . import _structs as S
from .errors import _token, _token_array, _unsigned, invalid_arg
from .model import Model
from .sampler import Sampler, sampler_params

# (seq, pending, guesses): one sequence's part of a verify step
SpecItem = Tuple[int, int, Sequence[int]]


def _free_speculator(lib: ctypes.CDLL, handle: int, release_draft: Callable[[], None]) -> None:
    lib.llmm_speculator_free(handle)
    release_draft()


class Speculator:
    """A speculator over a Context (``llmm_speculator_create``).

    Args:
        ctx: the target's open Context; the speculator keeps it alive, and closing the
            context closes the speculator first.
        draft_model: a Model with the context model's vocabulary (checked); it runs in a
            context of its own with the target's sizes. Kept open while the speculator is.
        max_tokens: guesses per round at most, 1..32 (library default 8).
        ngram, min_ngram: prompt lookup when there is no draft model: the longest and shortest
            n-gram of the sequence's own tokens to match (ngram 0 or None: off).
        draft_sampling: how the draft guesses, as Sampler's keyword arguments (temperature,
            top_k, top_p, min_p, seed); None or temperature 0: its argmax.

    With neither a draft model nor ngram, propose() returns nothing and verify()/accept()
    check guesses the app makes. One thread at a time, as its context: calls take the
    context's lock.

    Raises:
        InvalidArgError (a closed context or model, a draft model of another vocabulary,
        values out of range), NoMemoryError, and the errors of creating the draft's context.
    """

    def __init__(self, ctx: Any, *, draft_model: Optional[Model] = None, max_tokens: Optional[int] = None,
                 ngram: Optional[int] = None, min_ngram: Optional[int] = None,
                 draft_sampling: Optional[Mapping[str, Any]] = None) -> None:
        from .context import Context  # context.py imports this module for close()
        if not isinstance(ctx, Context):
            raise invalid_arg(f"Speculator needs a Context, not {type(ctx).__name__}")
        if draft_model is not None and not isinstance(draft_model, Model):
            raise invalid_arg(f"draft_model is a Model, not {type(draft_model).__name__}")
        self._lib = _lib.lib()
        self._handle: Optional[int] = None
        self.context = ctx
        params = S.sized(S.SpeculatorParams)
        _lib.check(self._lib.llmm_speculator_params_default(ctypes.byref(params), ctypes.sizeof(params)))
        for name, value in (("max_tokens", max_tokens), ("ngram", ngram), ("min_ngram", min_ngram)):
            if value is not None:
                params.__setattr__(name, _unsigned(name, value, 31))
        sampling = sampler_params(**dict(draft_sampling)) if draft_sampling is not None else None
        if sampling is not None:
            params.sampling = ctypes.pointer(sampling)
        release: Callable[[], None] = (lambda: None)
        if draft_model is not None:
            params.draft_model = draft_model._acquire()
            release = draft_model._release
        handle = ctypes.c_void_p()
        try:
            with ctx._lock:
                status = self._lib.llmm_speculator_create(ctx._h(), ctypes.byref(params), ctypes.byref(handle))
                ctx._check(status)
        except BaseException:
            release()
            raise
        self._handle = handle.value
        self.draft_model = draft_model
        self._n_items = 0  # items of the last verify
        self._finalizer = weakref.finalize(self, _free_speculator, self._lib, handle.value, release)
        ctx._speculators.add(self)

    @property
    def closed(self) -> bool:
        """True once close() was called (or its context closed)."""
        return self._handle is None

    def _h(self) -> int:
        if self._handle is None:
            raise invalid_arg("the speculator is closed")
        return self._handle

    def propose(self, seq: int, pending: int, max_tokens: int = S.SPEC_MAX_TOKENS) -> List[int]:
        """Guesses for what follows sequence seq's tokens and then pending (the token chosen
        last, not yet decoded): at most max_tokens and the current draft length, which adapts to
        how many guesses the sequence's recent rounds kept ([] when the proposer has none, or
        pauses after rounds that kept none). Raises InvalidArgError, and the errors of the draft
        model's steps."""
        cap = _unsigned("max_tokens", max_tokens, 31)
        out = (S.llmm_token * max(cap, 1))()
        n = ctypes.c_size_t()
        ctx = self.context
        with ctx._lock:
            h = self._h()
            with ctx._abort.call():
                status = self._lib.llmm_speculator_propose(h, _unsigned("seq", seq, 31), _token(pending), out, cap,
                                                           ctypes.byref(n))
            ctx._check(status)
        return list(out[:n.value])

    def verify(self, items: Sequence[SpecItem]) -> None:
        """One forward step over each item's pending token and guesses, items being
        (seq, pending, guesses) of distinct sequences; afterwards ``context.logits(r)`` reads
        the rows, item by item, 1 + len(guesses) rows each. Then accept() each item. Raises
        InvalidArgError (also more rows than the context's n_outputs_max), ContextFullError
        (nothing changes), and the errors of decode."""
        if isinstance(items, tuple) and len(items) == 3 and isinstance(items[0], int):
            raise invalid_arg("verify takes a list of (seq, pending, guesses) items")
        arrays = []
        c_items = (S.SpecItem * max(len(items), 1))()
        for i, item in enumerate(items):
            try:
                seq, pending, guesses = item
            except (TypeError, ValueError):
                raise invalid_arg(f"verify: item {i} is not (seq, pending, guesses): {item!r}") from None
            if len(guesses) > S.SPEC_MAX_TOKENS:
                raise invalid_arg(f"verify: item {i} has {len(guesses)} guesses, at most {S.SPEC_MAX_TOKENS}")
            arr = _token_array(guesses)
            arrays.append(arr)  # alive until the call returns
            c_items[i] = S.SpecItem(_unsigned("seq", seq, 31), _token(pending),
                                    ctypes.cast(arr, ctypes.POINTER(S.llmm_token)), len(arr))
        ctx = self.context
        with ctx._lock:
            h = self._h()
            ctx._release_views()
            with ctx._abort.call():
                status = self._lib.llmm_speculator_verify(h, c_items, len(items))
            ctx._check(status)
            self._n_items = len(items)

    def accept(self, item: int, sampler: Sampler) -> List[int]:
        """Decide item `item` of the last verify with sampler: returns the kept guesses and then
        the next token (the new pending one), all accepted into sampler; the sequence keeps
        pending and the kept guesses. Greedy samplers draw nothing; sampling ones draw one
        number per guess examined, then one for the next token. Raises InvalidArgError (no such
        item, or decided already), and the sampling errors."""
        if not isinstance(sampler, Sampler):
            raise invalid_arg(f"accept needs a Sampler, not {type(sampler).__name__}")
        index = _unsigned("item", item, 63)
        out = (S.llmm_token * (1 + S.SPEC_MAX_TOKENS))()
        n = ctypes.c_size_t()
        ctx = self.context
        with ctx._lock, sampler._lock:
            h = self._h()
            ctx._release_views()
            with ctx._abort.call():
                status = self._lib.llmm_speculator_accept(h, index, sampler.handle, out, len(out), ctypes.byref(n))
            ctx._check(status)
        return list(out[:n.value])

    def close(self) -> None:
        """Free the speculator (idempotent); gives back the draft model."""
        with self.context._lock:
            if self._handle is not None:
                self._handle = None
                self._finalizer()

    def __enter__(self) -> "Speculator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        draft = f", draft={self.draft_model.path!r}" if self.draft_model is not None else ""
        return f"<llmmini.Speculator {state}{draft}>"


__all__ = ["Speculator", "SpecItem"]
