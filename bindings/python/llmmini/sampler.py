"""Sampler: the library's token sampler (``llmm_sampler``), and the sampling arguments every
generating call shares, checked once here."""
from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Optional, Sequence

from . import _lib
from . import _structs as S
from .errors import LLMM_OK, _token, invalid_arg


def sampler_params(*, temperature: Optional[float] = None, top_k: Optional[int] = None,
                   top_p: Optional[float] = None, min_p: Optional[float] = None,
                   repeat_penalty: Optional[float] = None, seed: Optional[int] = None) -> S.SamplerParams:
    """``llmm_sampler_params``: the library's defaults, with the values given (not None) checked
    and set. Raises InvalidArgError."""
    lib = _lib.lib()
    params = S.sized(S.SamplerParams)
    _lib.check(lib.llmm_sampler_params_default(ctypes.byref(params), ctypes.sizeof(params)))
    for name, value in (("temperature", temperature), ("top_p", top_p), ("min_p", min_p),
                        ("repeat_penalty", repeat_penalty)):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise invalid_arg(f"{name} must be a number, not {value!r}")
            setattr(params, name, float(value))
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k < (1 << 31):
            raise invalid_arg(f"top_k must be an int >= 0, not {top_k!r}")
        params.top_k = top_k
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < (1 << 64):
            raise invalid_arg(f"seed must be an int in 0..2**64-1, not {seed!r}")
        params.seed = seed
    return params


def _free_sampler(lib: ctypes.CDLL, handle: int) -> None:
    lib.llmm_sampler_free(handle)


class Sampler:
    """A token sampler (``llmm_sampler_create``): penalties, top-k/p, min-p, temperature and a
    seeded RNG (the same seed gives the same draws on every platform). Used with
    ``Context.decode_sample`` (sampling on the device where the context runs on one) or alone
    with ``sample(logits)``. Like the C object, for one thread at a time (a lock serializes).

    Args (None keeps the library's default): temperature (0: greedy), top_k, top_p, min_p,
    repeat_penalty, seed.
    """

    def __init__(self, *, temperature: Optional[float] = None, top_k: Optional[int] = None,
                 top_p: Optional[float] = None, min_p: Optional[float] = None,
                 repeat_penalty: Optional[float] = None, seed: Optional[int] = None) -> None:
        self._lib = _lib.lib()
        self._lock = threading.Lock()
        params = sampler_params(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                repeat_penalty=repeat_penalty, seed=seed)
        handle = ctypes.c_void_p()
        _lib.check(self._lib.llmm_sampler_create(ctypes.byref(params), ctypes.byref(handle)))
        self._handle: Optional[int] = handle.value
        self._finalizer = weakref.finalize(self, _free_sampler, self._lib, handle.value)

    @property
    def handle(self) -> int:
        """The ``llmm_sampler *``; InvalidArgError once closed."""
        if self._handle is None:
            raise invalid_arg("the sampler is closed")
        return self._handle

    def _check(self, status: int) -> None:
        if status != LLMM_OK:
            msg = self._lib.llmm_sampler_last_error(self._handle) or b""
            _lib.check(status, msg.decode("utf-8", "replace"))

    def sample(self, logits: Sequence[float]) -> int:
        """A token chosen from a row of logits (a ``Context.logits`` view, or any floats; -inf
        masks a token). Does not accept it: call accept(). Raises InvalidArgError (every logit
        -inf), LlmminiError (NUMERICAL: a NaN or +inf logit)."""
        if isinstance(logits, memoryview) and logits.format == "f" and logits.contiguous:
            row = (ctypes.c_float * len(logits)).from_buffer_copy(logits)
        else:
            row = (ctypes.c_float * len(logits))(*logits)
        out = S.llmm_token()
        with self._lock:
            self._check(self._lib.llmm_sample(self.handle, row, len(row), ctypes.byref(out)))
        return out.value

    def accept(self, token: int) -> None:
        """Tell the penalties that token was used."""
        with self._lock:
            self._check(self._lib.llmm_sampler_accept(self.handle, _token(token)))

    def reset(self) -> None:
        """Forget accepted tokens and restart the RNG from the seed."""
        with self._lock:
            self._check(self._lib.llmm_sampler_reset(self.handle))

    def close(self) -> None:
        """Free the sampler (idempotent)."""
        with self._lock:
            if self._handle is not None:
                self._handle = None
                self._finalizer()

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Sampler"]
