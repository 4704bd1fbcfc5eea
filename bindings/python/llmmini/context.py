"""Context: the KV cache and compute state over a Model, used by one thread at a time."""
from __future__ import annotations

import ctypes
import os
import threading
import weakref
from dataclasses import dataclass, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _lib
from . import _structs as S
from ._abort import AbortState
from ._handle import HandleOwner
from .errors import LLMM_ERR_BUFFER_TOO_SMALL, LLMM_OK, _token_array, _unsigned, invalid_arg
from .adapter import (MAX_SEQ_ADAPTERS, Adapter, AdapterCacheEntry, AdapterCacheStats, cache_entry,
                      cache_stats)
from .batch import Batch
from .tools import ChatParser, Grammar, tool_trigger
from .generate import Generation, Speculation, start_generation
from .model import Message, Model
from .sampler import Sampler

try:  # numpy is optional: only Context.logits_array needs it
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the environment
    _np = None


@dataclass(frozen=True)
class ContextStats:
    """KV pool occupancy, work done, cold-start costs and latency percentiles
    (``llmm_context_stats``): n_requests generate calls; request_first_token_ms_* from a call's
    start to its first token; inter_token_ms_* between consecutive tokens of a call;
    step_ms_* each decode step's wall time. From fixed-size histograms: within 3.2 %, max exact."""

    kv_type: str
    block_size: int
    n_seq_used: int
    blocks_total: int
    blocks_used: int
    blocks_free: int
    blocks_shared: int
    blocks_cached: int
    kv_bytes: int
    block_bytes: int
    fragmentation: float
    tokens_prefilled: int
    tokens_decoded: int
    prefill_ms: float
    decode_ms: float
    prefix_hits: int
    module_load_ms: float
    backend_init_ms: float
    weights_ms: float
    warmup_ms: float
    graph_capture_ms: float
    first_token_ms: float
    graphs: int
    graph_replays: int
    n_requests: int = 0
    request_first_token_ms_p50: float = 0.0
    request_first_token_ms_p95: float = 0.0
    request_first_token_ms_p99: float = 0.0
    request_first_token_ms_max: float = 0.0
    inter_token_ms_p50: float = 0.0
    inter_token_ms_p95: float = 0.0
    inter_token_ms_p99: float = 0.0
    inter_token_ms_max: float = 0.0
    step_ms_p50: float = 0.0
    step_ms_p95: float = 0.0
    step_ms_p99: float = 0.0
    step_ms_max: float = 0.0


@dataclass(frozen=True)
class ContextMemory:
    """Where a context's memory would go (``llmm_context_memory``): host_bytes + device_bytes
    (``total``, what ``llmm_context_estimate`` gives) split into the KV pool, the backend's copy
    of the weights (0 on the CPU), one step's activations, the backend's scratch and the
    host-only tables. LoRA adapters are not counted."""

    host_bytes: int
    device_bytes: int
    kv_pool_bytes: int
    weights_bytes: int
    activations_bytes: int
    scratch_bytes: int
    other_host_bytes: int

    @property
    def total(self) -> int:
        """Host and device bytes together."""
        return self.host_bytes + self.device_bytes


AdapterSpec = Union[Adapter, Tuple[Adapter, float]]
"""An adapter to run a sequence with: an Adapter (scale 1) or (Adapter, scale)."""

_KV_NAMES = {v: k for k, v in S.KV_TYPES.items()}


def _free_context(lib: ctypes.CDLL, handle: int, model: Model) -> None:
    lib.llmm_context_free(handle)
    model._release()


class Context(HandleOwner):
    """A context over a model (``llmm_context_create``): the KV pool of its sequences, the
    backend's buffers and the logits of the last step.

    Thread-safety: one thread at a time, as in C; calls from several threads are serialized by
    a lock (a call waits while a generation of this context runs). Different contexts, even on
    one model, run in parallel (the library releases the GIL while it computes).

    Lifetime: keeps its model alive; ``close()`` (idempotent), leaving a ``with`` block or
    garbage collection frees it.

    Cancelling: calls that compute (prefill, decode, generate) stop with AbortedError when
    ``abort_event`` is set (the sequence is left as before the call; clear the event to go
    on), and with KeyboardInterrupt on Ctrl-C when made from the main thread.

    Args (None keeps the library's default):
        model: an open Model (not vocab-only).
        n_ctx: tokens per sequence (0: the model's training length, at most 4096).
        n_seq_max: sequence ids 0..n_seq_max-1.
        kv_type: "f16" (default), "f32" or "q8".
        threads: compute threads (0: the number of physical cores).
        n_batch: prefill chunk in tokens.
        backend: "auto", "cpu" or "cuda".
        kv_block_size, n_ctx_total, kv_budget_bytes, prefix_cache, device, n_outputs_max: as
            in ``llmm_context_params``.
        adapter_budget_bytes: the adapter cache's budget (register_adapter); 0: no limit.
        abort_event: a threading.Event that cancels running calls while set.

    Raises:
        VocabOnlyError, NoMemoryError, BackendError, UnsupportedError, InvalidArgError.
    """

    def __init__(self, model: Model, *, n_ctx: Optional[int] = None, n_seq_max: Optional[int] = None,
                 kv_type: str = "f16", threads: Optional[int] = None, n_batch: Optional[int] = None,
                 backend: str = "auto", kv_block_size: Optional[int] = None, n_ctx_total: Optional[int] = None,
                 kv_budget_bytes: Optional[int] = None, prefix_cache: Optional[bool] = None,
                 device: Optional[int] = None, abort_event: Optional[threading.Event] = None,
                 adapter_budget_bytes: Optional[int] = None, n_outputs_max: Optional[int] = None) -> None:
        if not isinstance(model, Model):
            raise invalid_arg(f"Context needs a Model, not {type(model).__name__}")
        self._lib = model._lib
        self._lock = threading.RLock()
        self._closed = True
        self._what = "context"
        params = _context_params(n_ctx=n_ctx, n_seq_max=n_seq_max, kv_type=kv_type, threads=threads,
                                 n_batch=n_batch, backend=backend, kv_block_size=kv_block_size,
                                 n_ctx_total=n_ctx_total, kv_budget_bytes=kv_budget_bytes,
                                 prefix_cache=prefix_cache, device=device,
                                 adapter_budget_bytes=adapter_budget_bytes, n_outputs_max=n_outputs_max)
        self._abort = AbortState(abort_event)
        params.abort = self._abort.c_fn
        model_handle = model._acquire()
        handle = ctypes.c_void_p()
        status = self._lib.llmm_context_create(model_handle, ctypes.byref(params), ctypes.byref(handle))
        if status != LLMM_OK:
            try:
                model._check(status)  # the library keeps a failed creation's message on the model
            finally:
                model._release()
        self._handle: int = handle.value  # type: ignore[assignment]
        self._closed = False
        self.model = model
        self._views: List["weakref.ref[memoryview]"] = []
        self._attached: Dict[int, Adapter] = {}  # handle -> the Adapter given to set_adapters
        # open Speculators over this context: freed before it, as the library requires
        self._speculators: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._finalizer = weakref.finalize(self, _free_context, self._lib, self._handle, model)

    # ------------------------------------------------------------------ memory

    @staticmethod
    def estimate_memory(model: Model, *, n_ctx: Optional[int] = None, n_seq_max: Optional[int] = None,
                        kv_type: str = "f16", threads: Optional[int] = None, n_batch: Optional[int] = None,
                        backend: str = "auto", kv_block_size: Optional[int] = None,
                        n_ctx_total: Optional[int] = None, kv_budget_bytes: Optional[int] = None,
                        prefix_cache: Optional[bool] = None, device: Optional[int] = None,
                        adapter_budget_bytes: Optional[int] = None,
                        n_outputs_max: Optional[int] = None) -> ContextMemory:
        """The memory a Context(model, same arguments) would allocate, by side and part, without
        creating it (``llmm_context_estimate_memory``; computes only). Raises InvalidArgError
        (arguments Context would refuse), VocabOnlyError, BackendError (backend="cuda" with no
        CUDA module or device)."""
        if not isinstance(model, Model):
            raise invalid_arg(f"estimate_memory needs a Model, not {type(model).__name__}")
        params = _context_params(n_ctx=n_ctx, n_seq_max=n_seq_max, kv_type=kv_type, threads=threads,
                                 n_batch=n_batch, backend=backend, kv_block_size=kv_block_size,
                                 n_ctx_total=n_ctx_total, kv_budget_bytes=kv_budget_bytes,
                                 prefix_cache=prefix_cache, device=device,
                                 adapter_budget_bytes=adapter_budget_bytes, n_outputs_max=n_outputs_max)
        out = S.sized(S.ContextMemory)
        handle = model._acquire()
        try:
            model._check(model._lib.llmm_context_estimate_memory(handle, ctypes.byref(params), ctypes.byref(out)))
        finally:
            model._release()
        return ContextMemory(**{name: getattr(out, name) for name, _ in S.ContextMemory._fields_ if name != "size"})

    # ------------------------------------------------------------------ lifetime

    @property
    def abort_event(self) -> Optional[threading.Event]:
        """The Event that cancels running calls while set (None: only Ctrl-C does)."""
        return self._abort.event

    @abort_event.setter
    def abort_event(self, event: Optional[threading.Event]) -> None:
        self._abort.event = event

    def close(self) -> None:
        """Free the context (idempotent). A running generation is stopped first."""
        run = self._abort.run
        if run is not None:
            run.cancel = True
        with self._lock:
            if self._closed:
                return
            for spec in list(self._speculators):
                spec.close()
            self._closed = True
            self._release_views()
            self._finalizer()

    def _check(self, status: int) -> None:
        """Raise for a failed call on this context, with the context's last message."""
        if status != LLMM_OK:
            _lib.check(status, self._last_error())

    def _last_error(self) -> str:
        """The library's message for the last failed call on this context ("" once closed)."""
        msg = self._lib.llmm_context_last_error(self._handle) if not self._closed else b""
        return (msg or b"").decode("utf-8", "replace")

    def _release_views(self) -> None:
        """Logits views end where the library's buffer may change: make them raise instead of
        reading stale or freed memory (views derived from them, such as numpy arrays, are not
        reached)."""
        for ref in self._views:
            view = ref()
            if view is not None:
                try:
                    view.release()
                except BufferError:  # a derived object still exports it
                    pass
        self._views.clear()

    # ------------------------------------------------------------------ compute

    def prefill(self, tokens: Sequence[int], seq: int = 0, all_logits: bool = False) -> None:
        """Append tokens to sequence seq and run them through the model (``llmm_prefill``).
        Afterwards logits(0) is the last position's row, or with all_logits=True logits(i)
        that of tokens[i]. Raises ContextFullError (nothing written), AbortedError,
        KeyboardInterrupt (the sequence is restored then), InvalidArgError."""
        arr = _token_array(tokens)
        flags = S.PREFILL_ALL_LOGITS if all_logits else 0
        with self._lock:
            h = self._h()
            self._release_views()
            with self._abort.call():
                status = self._lib.llmm_prefill(h, _seq(seq), arr, len(arr), flags)
            self._check(status)

    def decode(self, tokens: Sequence[int], seqs: Optional[Sequence[int]] = None) -> None:
        """One step: appends tokens[i] to sequence seqs[i] (default: sequence i) for every i,
        and computes row i of the logits (``llmm_decode``). On any error no sequence changes."""
        arr = _token_array(tokens)
        ids = list(range(len(arr))) if seqs is None else [_seq(s) for s in seqs]
        if len(ids) != len(arr):
            raise invalid_arg(f"decode: {len(arr)} tokens for {len(ids)} sequences")
        seq_arr = (S.llmm_seq_id * len(ids))(*ids)
        with self._lock:
            h = self._h()
            self._release_views()
            with self._abort.call():
                status = self._lib.llmm_decode(h, seq_arr, arr, len(arr))
            self._check(status)

    def decode_sample(self, tokens: Sequence[int], samplers: Union[Sampler, Sequence[Sampler]],
                      seqs: Optional[Sequence[int]] = None) -> List[int]:
        """decode(tokens, seqs), then the token samplers[i] chooses from row i
        (``llmm_decode_sample``): on a device backend the sampling runs there and only the ids
        come back. One Sampler serves every row, or one per row. The tokens are not accepted:
        call sampler.accept(token) for those used. Same errors as decode; after a successful
        decode, a sampling error (NUMERICAL, or every logit -inf) leaves the tokens appended."""
        arr = _token_array(tokens)
        ids = list(range(len(arr))) if seqs is None else [_seq(s) for s in seqs]
        if len(ids) != len(arr):
            raise invalid_arg(f"decode_sample: {len(arr)} tokens for {len(ids)} sequences")
        row_samplers = [samplers] * len(arr) if isinstance(samplers, Sampler) else list(samplers)
        if len(row_samplers) != len(arr) or not all(isinstance(x, Sampler) for x in row_samplers):
            raise invalid_arg(f"decode_sample: one Sampler, or one per token ({len(arr)})")
        seq_arr = (S.llmm_seq_id * len(ids))(*ids)
        handles = (ctypes.c_void_p * max(len(arr), 1))(*[x.handle for x in row_samplers])
        out = (S.llmm_token * max(len(arr), 1))()
        with self._lock:
            h = self._h()
            self._release_views()
            with self._abort.call():
                status = self._lib.llmm_decode_sample(h, seq_arr, arr, len(arr), handles, out)
            self._check(status)
        return list(out[:len(arr)])

    def logits(self, i: int = 0) -> memoryview:
        """Row i of the last step's logits as a read-only memoryview of n_vocab floats over the
        library's buffer, without copying. It is valid until the next call that computes or
        close(): then it is released and using it raises ValueError. Copy it (``list(v)``,
        ``bytes(v)``) to keep it. Raises NotFoundError for a row the last step did not make."""
        with self._lock:
            ptr = ctypes.POINTER(ctypes.c_float)()
            n = ctypes.c_size_t()
            self._check(self._lib.llmm_logits(self._h(), _unsigned("i", i, 64), ctypes.byref(ptr), ctypes.byref(n)))
            # the ctypes array over the row keeps the context alive while the view exists
            row = (ctypes.c_float * n.value).from_address(ctypes.addressof(ptr.contents))
            row._owner = self  # type: ignore[attr-defined]
            view = memoryview(row).cast("B").cast("f").toreadonly()
            self._views.append(weakref.ref(view))
            return view

    def logits_array(self, i: int = 0) -> Any:
        """Row i of the logits as a read-only numpy float32 array over the library's buffer (no
        copy; valid as long as logits(i) would be, but not released automatically: copy it
        with ``.copy()`` before the next step). Needs numpy; raises ImportError without."""
        if _np is None:
            raise ImportError("Context.logits_array needs numpy; Context.logits gives a memoryview")
        arr = _np.frombuffer(self.logits(i), dtype=_np.float32)
        return arr

    # ------------------------------------------------------------------ sequences

    def seq_create(self) -> int:
        """An unused sequence id, in use until seq_free (``llmm_seq_create``)."""
        out = S.llmm_seq_id()
        with self._lock:
            self._check(self._lib.llmm_seq_create(self._h(), ctypes.byref(out)))
        return out.value

    def seq_free(self, seq: int) -> None:
        """Clear seq and make its id available to seq_create again."""
        with self._lock:
            self._check(self._lib.llmm_seq_free(self._h(), _seq(seq)))

    def fork(self, seq: int) -> int:
        """A new sequence holding the same tokens as seq, sharing its KV blocks (copy on write);
        returns its id. Raises ContextFullError when no id is free."""
        out = S.llmm_seq_id()
        with self._lock:
            self._check(self._lib.llmm_seq_fork(self._h(), _seq(seq), ctypes.byref(out)))
        return out.value

    def clear(self, seq: int = 0) -> None:
        """Forget all tokens of seq."""
        with self._lock:
            self._check(self._lib.llmm_seq_clear(self._h(), _seq(seq)))

    def truncate(self, seq: int, n_keep: int) -> None:
        """Keep the first n_keep tokens of seq."""
        with self._lock:
            self._check(self._lib.llmm_seq_truncate(self._h(), _seq(seq), _unsigned("n_keep", n_keep, 64)))

    def seq_length(self, seq: int = 0) -> int:
        """Number of tokens seq holds."""
        n = ctypes.c_size_t()
        with self._lock:
            self._check(self._lib.llmm_seq_length(self._h(), _seq(seq), ctypes.byref(n)))
        return n.value

    def save(self, seq: int = 0, path: Optional[Union[str, "os.PathLike[str]"]] = None, level: int = 0) -> Optional[bytes]:
        """Save seq's tokens and K/V (zstd level 1..22, 0 = default): into the file at path, or,
        without path, as the returned bytes. Raises IoError, InvalidArgError."""
        level = _unsigned("level", level, 5)
        with self._lock:
            h = self._h()
            if path is not None:
                self._check(self._lib.llmm_seq_save(h, _seq(seq), os.fsencode(path), level))
                return None
            n = ctypes.c_size_t()
            status = self._lib.llmm_seq_save_buffer(h, _seq(seq), level, None, 0, ctypes.byref(n))
            if status != LLMM_ERR_BUFFER_TOO_SMALL:  # the expected answer, with the bound in n
                self._check(status)
            buf = ctypes.create_string_buffer(n.value)
            self._check(self._lib.llmm_seq_save_buffer(h, _seq(seq), level, buf, n.value, ctypes.byref(n)))
            return buf.raw[:n.value]

    def load(self, source: Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"], seq: int = 0) -> None:
        """Replace seq's content with a saved state: bytes from save(), or the path of a file
        it wrote. Raises BadFileError (another model or KV type, corrupted; seq unchanged),
        ContextFullError, IoError."""
        with self._lock:
            h = self._h()
            self._release_views()
            if isinstance(source, (bytes, bytearray, memoryview)):
                data = bytes(source)
                self._check(self._lib.llmm_seq_load_buffer(h, _seq(seq), data, len(data)))
            else:
                self._check(self._lib.llmm_seq_load(h, _seq(seq), os.fsencode(source)))

    # ------------------------------------------------------------------ adapters

    def set_adapters(self, seq: int, adapters: Sequence[AdapterSpec]) -> None:
        """Run seq with these LoRA adapters (``llmm_seq_set_adapters``), each an Adapter (scale
        1) or (Adapter, scale), their deltas summed; [] detaches all. Replaces seq's adapters,
        never touching other sequences: a hot swap. Tokens seq already holds keep the K/V the
        old adapters gave them (truncate and prefill again where that matters). Raises
        InvalidArgError (more than MAX_SEQ_ADAPTERS, one repeated or of another model, a
        non-finite scale), UnsupportedError (a backend that cannot run adapters)."""
        pairs = [a if isinstance(a, tuple) else (a, 1.0) for a in adapters]
        if len(pairs) > MAX_SEQ_ADAPTERS:
            raise invalid_arg(f"at most {MAX_SEQ_ADAPTERS} adapters per sequence, not {len(pairs)}")
        for adapter, scale in pairs:
            if not isinstance(adapter, Adapter):
                raise invalid_arg(f"an adapter is an Adapter or (Adapter, scale), not {adapter!r}")
            if isinstance(scale, bool) or not isinstance(scale, (int, float)):
                raise invalid_arg(f"an adapter's scale is a number, not {scale!r}")
        n = len(pairs)
        handles = (ctypes.c_void_p * max(n, 1))(*[a._h() for a, _ in pairs])
        scales = (ctypes.c_float * max(n, 1))(*[float(x) for _, x in pairs])
        with self._lock:
            self._check(self._lib.llmm_seq_set_adapters(self._h(), _seq(seq), handles, scales, n))
            # the objects stay reachable for adapters(): the library holds the handles meanwhile
            for adapter, _ in pairs:
                self._attached[adapter._handle] = adapter

    def adapters(self, seq: int = 0) -> List[Tuple[Optional[Adapter], float]]:
        """seq's adapters and scales (``llmm_seq_get_adapters``): the Adapter objects given to
        set_adapters, or None for one the adapter cache loaded (use_adapters)."""
        handles = (ctypes.c_void_p * MAX_SEQ_ADAPTERS)()
        scales = (ctypes.c_float * MAX_SEQ_ADAPTERS)()
        n = ctypes.c_size_t()
        with self._lock:
            self._check(self._lib.llmm_seq_get_adapters(self._h(), _seq(seq), handles, scales, MAX_SEQ_ADAPTERS,
                                                        ctypes.byref(n)))
            return [(self._attached.get(handles[i] or 0), scales[i]) for i in range(n.value)]

    def register_adapter(self, path: Union[str, "os.PathLike[str]"]) -> int:
        """Register an adapter file with the context's adapter cache and return its id (the
        same path gets the same id). Nothing is read until use_adapters needs it."""
        out = ctypes.c_int32()
        with self._lock:
            self._check(self._lib.llmm_adapter_register(self._h(), os.fsencode(path), ctypes.byref(out)))
        return out.value

    def use_adapters(self, seq: int, ids: Sequence[Union[int, Tuple[int, float]]]) -> None:
        """set_adapters with registered adapters, each an id (scale 1) or (id, scale): those not
        loaded are loaded (their errors, BadFileError or IoError, leave seq's adapters as they
        were), then the least recently used ones beyond adapter_budget_bytes are evicted (never
        one a sequence runs with)."""
        pairs = [x if isinstance(x, tuple) else (x, 1.0) for x in ids]
        if len(pairs) > MAX_SEQ_ADAPTERS:
            raise invalid_arg(f"at most {MAX_SEQ_ADAPTERS} adapters per sequence, not {len(pairs)}")
        n = len(pairs)
        id_arr = (ctypes.c_int32 * max(n, 1))(*[_unsigned("adapter id", i, 31) for i, _ in pairs])
        scales = (ctypes.c_float * max(n, 1))(*[float(x) for _, x in pairs])
        with self._lock:
            self._check(self._lib.llmm_seq_use_adapters(self._h(), _seq(seq), id_arr, scales, n))

    @property
    def adapter_cache_stats(self) -> AdapterCacheStats:
        """The adapter cache's counters (``llmm_adapter_cache_get_stats``)."""
        s = S.sized(S.AdapterCacheStats)
        with self._lock:
            self._check(self._lib.llmm_adapter_cache_get_stats(self._h(), ctypes.byref(s)))
        return cache_stats(s)

    def adapter_cache_entry(self, adapter_id: int) -> AdapterCacheEntry:
        """One registered adapter's state (``llmm_adapter_cache_get_entry``). Raises
        NotFoundError for an id not registered."""
        s = S.sized(S.AdapterCacheEntry)
        with self._lock:
            self._check(self._lib.llmm_adapter_cache_get_entry(self._h(), _unsigned("adapter id", adapter_id, 31),
                                                               ctypes.byref(s)))
            return cache_entry(s)

    # ------------------------------------------------------------------ stats

    @property
    def stats(self) -> ContextStats:
        """KV pool occupancy and work done so far (``llmm_context_get_stats``)."""
        s = S.sized(S.ContextStatsStruct)
        with self._lock:
            self._check(self._lib.llmm_context_get_stats(self._h(), ctypes.byref(s)))
        values = {f.name: getattr(s, f.name) for f in fields(ContextStats)}
        values["kv_type"] = _KV_NAMES.get(values["kv_type"], str(values["kv_type"]))
        return ContextStats(**values)

    # ------------------------------------------------------------------ generation

    def generate(self, prompt: Union[str, bytes], *, max_tokens: int = 128, temperature: Optional[float] = None,
                 top_k: Optional[int] = None, top_p: Optional[float] = None, min_p: Optional[float] = None,
                 repeat_penalty: Optional[float] = None, seed: Optional[int] = None, stop: Sequence[str] = (),
                 seq: int = 0, add_special: bool = True, parse_special: bool = False,
                 grammar: Optional[Union[str, Grammar]] = None, json_schema: Optional[Union[str, Mapping]] = None,
                 json_whitespace: str = "compact", grammar_trigger: Optional[str] = None,
                 draft_model: Optional[Model] = None, spec_ngram: Optional[int] = None,
                 spec_max_tokens: Optional[int] = None, spec_min_ngram: Optional[int] = None,
                 tool_parser: Optional[ChatParser] = None) -> Generation:
        """Generate text from prompt (``llmm_generate``): an iterator of str pieces, each ending
        on a whole UTF-8 character (bytes the model emits that can never form one decode to
        U+FFFD). Sequence seq is cleared first. Sampling values left None take the library's
        defaults (temperature 0 is greedy). Generation stops at EOS, a stop string (not
        yielded), max_tokens or a full context; afterwards the iterator's ``tokens``,
        ``text`` and ``stats`` tell what happened.

        The library runs in a worker thread while the caller iterates; breaking out of the loop
        (or ``close()``) stops it. Ctrl-C while iterating stops it and raises
        KeyboardInterrupt; the context's abort_event raises AbortedError from the iterator.

        grammar (GBNF text or a tools.Grammar) or json_schema (JSON text or a dict; compact JSON
        unless json_whitespace="free") constrains the output; ``json.loads(gen.text)`` then
        gives the object. grammar_trigger makes the grammar lazy: free text until the output
        contains it, the grammar from there on (docs/grammars.md).

        Speculative decoding: draft_model (a Model with this model's vocabulary) or spec_ngram
        (prompt lookup: propose what followed the last spec_ngram tokens earlier on, down to
        spec_min_ngram) guesses up to spec_max_tokens tokens a step, verified in one forward
        pass: greedy output is the same as without, sampled output follows the same
        distribution; ``stats`` tells how many guesses were kept. Not with a grammar.

        tool_parser (a fresh ChatParser of the prompt's tool family) is fed every piece by the
        library as it streams them (``llmm_generate_params.tool_parser``): afterwards
        ``tool_parser.result(final=True)`` holds the reply's content, reasoning and calls, and
        ``stats.n_tool_calls`` counts the complete calls."""
        if json_schema is not None:
            if grammar is not None:
                raise invalid_arg("grammar and json_schema exclude each other")
            grammar = Grammar.from_json_schema(self.model, json_schema, json_whitespace)
        speculation = None
        if draft_model is not None or spec_ngram is not None or spec_max_tokens is not None:
            if draft_model is not None and not isinstance(draft_model, Model):
                raise invalid_arg(f"draft_model is a Model, not {type(draft_model).__name__}")
            draft = draft_model._acquire() if draft_model is not None else None
            speculation = Speculation(draft, draft_model._release if draft_model is not None else (lambda: None),
                                      spec_max_tokens, spec_ngram, spec_min_ngram)
        try:
            return start_generation(self._run_generation, prompt, max_tokens=max_tokens, temperature=temperature,
                                    top_k=top_k, top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty, seed=seed,
                                    stop=stop, seq=_seq(seq), add_special=add_special, parse_special=parse_special,
                                    grammar=grammar, grammar_trigger=grammar_trigger, speculation=speculation,
                                    tool_parser=tool_parser)
        except BaseException:
            if speculation is not None:  # no worker started to give the draft back
                speculation.release()
            raise

    def generate_batch(self, prompts: Sequence[Union[str, bytes]], *, max_tokens: int = 128,
                       temperature: Optional[float] = None, top_k: Optional[int] = None,
                       top_p: Optional[float] = None, min_p: Optional[float] = None,
                       repeat_penalty: Optional[float] = None, seed: Optional[int] = None,
                       seqs: Optional[Sequence[int]] = None, add_special: bool = True,
                       parse_special: bool = False) -> Batch:
        """Generate from several prompts together: each prompt is prefilled into its own
        sequence (seqs, default 0..n-1, cleared first), then every step decodes one token of
        each sequence still running in one ``llmm_decode_sample`` (sampled on the device where
        the context runs on one). Sequence i samples with seed + i. An iterator of (i, piece):
        pieces end on whole UTF-8 characters; afterwards ``texts``, ``tokens`` and
        ``stop_reasons`` ("eos", "max_tokens", "context_full") hold each prompt's. Runs in the
        calling thread, one step per batch of pieces; other calls on the context wait between
        steps only, so leave the context alone while iterating."""
        return Batch(self, prompts, max_tokens=max_tokens,
                     sampling=dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                   repeat_penalty=repeat_penalty, seed=seed),
                     seqs=seqs, add_special=add_special, parse_special=parse_special)

    def chat(self, messages: Sequence[Message], *, template: Optional[str] = None,
             tools: Optional[Sequence[Mapping]] = None, tool_choice: str = "auto", tool_family: Optional[str] = None,
             **kwargs: Any) -> Generation:
        """Generate the assistant's reply to messages: the model's chat format (or the built-in
        one named by template) with the generation prompt, tokenized with special tokens
        parsed, then generate(prompt, **kwargs).

        With tools (OpenAI-style dicts; messages may then carry tool_calls and tool results),
        the request is rendered in the model's tool family (or tool_family) and a call the model
        makes is held to its tool's schema: tool_choice "auto" lets it write text or start a
        call, "required" makes the reply a call. The generation's ``tool_calls`` are the calls
        (OpenAI-style dicts) once it has run, and ``stats.n_tool_calls`` their number as the
        library's parser counted them."""
        kwargs.setdefault("parse_special", True)
        if not tools:
            prompt = self.model.chat_format(messages, template=template, add_generation_prompt=True)
            return self.generate(prompt, **kwargs)
        if tool_choice not in ("auto", "required"):
            raise invalid_arg(f"tool_choice is 'auto' or 'required', not {tool_choice!r}")
        family = tool_family or self.model.tool_family
        if family is None:
            raise invalid_arg("the model's template is of no tool family: pass tool_family")
        prompt = self.model.chat_format(messages, tools=tools, tool_family=family)
        grammar = Grammar.from_tools(self.model, tools, family)
        trigger = tool_trigger(family) if tool_choice == "auto" else None
        gen = self.generate(prompt, grammar=grammar, grammar_trigger=trigger, tool_parser=ChatParser(family, tools=tools),
                            **kwargs)
        gen.tool_family = family
        return gen

    def _run_generation(self, run: Any, call: Callable[[int], int]) -> Tuple[int, str]:
        """Internal: the one way generate.py uses a context (see generate.GenerationHost).
        Runs call(handle), a llmm_generate on the generation's worker thread, holding the
        context's lock, with the logits views released and run registered with the abort
        callback (run.cancel stops the call). Returns the status and, when it failed, the
        context's message. Raises InvalidArgError once closed."""
        with self._lock:
            h = self._h()
            self._release_views()
            with self._abort.running(run):
                status = call(h)
            return status, (self._last_error() if status != LLMM_OK else "")

    def __repr__(self) -> str:
        return f"<llmmini.Context on {self.model!r} {'closed' if self._closed else 'open'}>"


def _context_params(*, kv_type: str, backend: str, **values: Any) -> S.ContextParams:
    """``llmm_context_params``: the library's defaults with the values given (not None)
    checked and set. Raises InvalidArgError."""
    if kv_type not in S.KV_TYPES:
        raise invalid_arg(f"kv_type {kv_type!r}: one of {list(S.KV_TYPES)}")
    if backend not in S.BACKENDS:
        raise invalid_arg(f"backend {backend!r}: one of {list(S.BACKENDS)}")
    lib = _lib.lib()
    params = S.sized(S.ContextParams)
    _lib.check(lib.llmm_context_params_default(ctypes.byref(params), ctypes.sizeof(params)))
    prefix_cache = values.pop("prefix_cache", None)
    threads = values.pop("threads", None)
    if threads is not None:
        params.n_threads = _unsigned("threads", threads, 31)
    device = values.pop("device", None)
    if device is not None:
        params.device = _unsigned("device", device, 31)
    for name, value in values.items():
        if value is not None:
            bits = 64 if name in ("kv_budget_bytes", "adapter_budget_bytes") else 32
            setattr(params, name, _unsigned(name, value, bits))
    if prefix_cache is not None:
        params.prefix_cache = 1 if prefix_cache else 0
    params.kv_type = S.KV_TYPES[kv_type]
    params.backend = S.BACKENDS[backend]
    return params


def _seq(seq: int) -> int:
    """A sequence id checked to fit llmm_seq_id (the library checks it against n_seq_max)."""
    return _unsigned("seq", seq, 31)


__all__ = ["Context", "ContextStats", "ContextMemory"]
