"""Adapter: a LoRA adapter loaded for a model (``llmm_adapter``), and the adapter cache's
statistics. Attaching adapters to sequences is Context's (set_adapters, use_adapters)."""
from __future__ import annotations

import ctypes
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Optional, Union

from . import _structs as S
from ._handle import HandleOwner
from .model import Model

MAX_SEQ_ADAPTERS = 8  # LLMM_MAX_SEQ_ADAPTERS: adapters one sequence runs with at once


@dataclass(frozen=True)
class AdapterInfo:
    """``llmm_adapter_info``: rank (largest of its tensors), alpha (0: none, the scale is the
    user's), n_tensors (base tensors it adapts), bytes (host memory it holds), fingerprint (a
    hash of its tensors and alpha: equal adapters, equal numbers)."""

    rank: int
    alpha: float
    n_tensors: int
    bytes: int
    fingerprint: int


@dataclass(frozen=True)
class AdapterCacheStats:
    """``llmm_adapter_cache_stats``: adapters registered and loaded now, the loaded ones'
    bytes against the budget (0: no limit), uses that found one loaded (hits), that loaded it
    (loads), evictions, and the wall time of all loads."""

    n_registered: int
    n_loaded: int
    bytes: int
    budget_bytes: int
    hits: int
    loads: int
    evictions: int
    load_ms: float


@dataclass(frozen=True)
class AdapterCacheEntry:
    """``llmm_adapter_cache_entry``: one registered adapter (path, loaded now, its bytes once
    loaded, loads and hits, wall time of its loads and of the latest)."""

    path: str
    loaded: bool
    bytes: int
    loads: int
    hits: int
    load_ms: float
    last_load_ms: float


def _free_adapter(lib: ctypes.CDLL, handle: int, model: Model) -> None:
    lib.llmm_adapter_free(handle)
    model._release()


class Adapter(HandleOwner):
    """A LoRA adapter for model (``llmm_adapter_load``, or ``llmm_adapter_load_memory`` for
    bytes). Immutable once loaded: any contexts of the model, on any threads, may attach it
    (``Context.set_adapters``). A sequence running with adapter X at scale s computes every
    adapted matmul as ``W x + s * alpha / rank * B (A x)``.

    Lifetime: keeps its model alive. ``close()`` drops this reference; sequences running with
    the adapter keep it until they are given others or their context closes.

    Raises BadFileError (not an adapter of this model: the message says why), IoError,
    VocabOnlyError, InvalidArgError.
    """

    def __init__(self, model: Model, source: Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]) -> None:
        if not isinstance(model, Model):
            raise TypeError(f"Adapter needs a Model, not {type(model).__name__}")
        self._lib = model._lib
        self._lock = threading.Lock()
        self._closed = True
        self._what = "adapter"
        model_handle = model._acquire()
        handle = ctypes.c_void_p()
        try:
            if isinstance(source, (bytes, bytearray, memoryview)):
                data = bytes(source)
                status = self._lib.llmm_adapter_load_memory(model_handle, data, len(data), ctypes.byref(handle))
            else:
                status = self._lib.llmm_adapter_load(model_handle, os.fsencode(source), ctypes.byref(handle))
            model._check(status)
        except BaseException:
            model._release()
            raise
        self._handle: int = handle.value  # type: ignore[assignment]
        self._closed = False
        self.model = model
        self.path = None if isinstance(source, (bytes, bytearray, memoryview)) else os.fspath(source)
        self._finalizer = weakref.finalize(self, _free_adapter, self._lib, self._handle, model)

    def close(self) -> None:
        """Drop this reference (idempotent); sequences still running with it keep it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._finalizer()

    @property
    def info(self) -> AdapterInfo:
        """Rank, alpha, tensors, bytes and fingerprint (``llmm_adapter_get_info``)."""
        s = S.sized(S.AdapterInfo)
        self.model._check(self._lib.llmm_adapter_get_info(self._h(), ctypes.byref(s)))
        return AdapterInfo(rank=s.rank, alpha=s.alpha, n_tensors=s.n_tensors, bytes=s.bytes,
                           fingerprint=s.fingerprint)

    def __repr__(self) -> str:
        where = self.path if self.path is not None else "<bytes>"
        return f"<llmmini.Adapter {where!r} {'closed' if self._closed else 'open'}>"


def cache_entry(s: S.AdapterCacheEntry) -> AdapterCacheEntry:
    """The dataclass of a filled ``llmm_adapter_cache_entry``."""
    return AdapterCacheEntry(path=(s.path or b"").decode("utf-8", "surrogateescape"), loaded=bool(s.loaded),
                             bytes=s.bytes, loads=s.loads, hits=s.hits, load_ms=s.load_ms,
                             last_load_ms=s.last_load_ms)


def cache_stats(s: S.AdapterCacheStats) -> AdapterCacheStats:
    """The dataclass of a filled ``llmm_adapter_cache_stats``."""
    return AdapterCacheStats(**{name: getattr(s, name) for name, _ in S.AdapterCacheStats._fields_ if name != "size"})


__all__ = ["Adapter", "AdapterInfo", "AdapterCacheStats", "AdapterCacheEntry", "MAX_SEQ_ADAPTERS"]
