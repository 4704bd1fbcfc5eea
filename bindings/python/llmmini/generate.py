"""Generation: llmm_generate as a Python iterator of text pieces.

llmm_generate streams through a callback and returns when done, so it runs in a worker thread
that hands each piece to the iterating thread through a queue. The library releases the GIL
while it computes, and the callback (on the worker) only decodes bytes and queues them.

This module does not know Context (context.py imports it, not the other way round): a context
hands start_generation its GenerationHost, the one internal method it offers for this.
"""
from __future__ import annotations

import ctypes
import queue
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

from . import _lib
from . import _structs as S
from .errors import LLMM_ERR_ABORTED, LLMM_OK, _unsigned, invalid_arg
from .sampler import sampler_params


@dataclass(frozen=True)
class GenerateStats:
    """What a generation did (``llmm_generate_stats``). stop_reason: "max_tokens", "eos",
    "stop_string", "callback" (the iterator was closed early), "context_full" or "grammar" (the
    grammar's sentence was complete). The spec_* fields are 0 without speculative decoding:
    spec_proposed guesses, spec_accepted of them kept, spec_acceptance their ratio,
    n_target_steps the target model's steps after the prompt, spec_draft_ms the proposer's
    time, spec_speedup_estimate tokens per target step discounted by the draft's time;
    grammar_ms is the grammar's share of generate_ms. With a tool parser (Context.chat with
    tools, or generate(tool_parser=)): n_tool_calls, the complete calls in the reply, and
    tool_malformed, whether its parse found text that is no call after a call's marker.
    inter_token_ms_p50/p95/p99/max: the gaps between consecutive tokens of this call (within
    3.2 %, max exact; tokens a speculative step accepted together come about 0 ms apart)."""

    n_prompt: int
    n_generated: int
    load_ms: float
    prompt_ms: float
    first_token_ms: float
    generate_ms: float
    prompt_tokens_per_s: float
    generate_tokens_per_s: float
    stop_reason: str
    spec_proposed: int = 0
    spec_accepted: int = 0
    spec_acceptance: float = 0.0
    n_target_steps: int = 0
    spec_draft_ms: float = 0.0
    spec_speedup_estimate: float = 0.0
    grammar_ms: float = 0.0
    n_tool_calls: int = 0
    tool_malformed: bool = False
    inter_token_ms_p50: float = 0.0
    inter_token_ms_p95: float = 0.0
    inter_token_ms_p99: float = 0.0
    inter_token_ms_max: float = 0.0


class Speculation:
    """The spec_* fields of one llmm_generate call: a draft model's handle (held for the call:
    release() gives it back, whoever runs last) or prompt lookup, and their bounds."""

    def __init__(self, draft_handle: Optional[int], release: Callable[[], None], max_tokens: Optional[int],
                 ngram: Optional[int], min_ngram: Optional[int]) -> None:
        self.draft_handle = draft_handle
        self._release = release
        self.max_tokens = None if max_tokens is None else _unsigned("spec_max_tokens", max_tokens, 31)
        self.ngram = None if ngram is None else _unsigned("spec_ngram", ngram, 31)
        self.min_ngram = None if min_ngram is None else _unsigned("spec_min_ngram", min_ngram, 31)

    def fill(self, params: S.GenerateParams) -> None:
        params.spec_draft_model = self.draft_handle
        for name in ("max_tokens", "ngram", "min_ngram"):
            value = getattr(self, name)
            if value is not None:
                setattr(params, "spec_" + name, value)

    def release(self) -> None:
        release, self._release = self._release, (lambda: None)
        release()


class _Done:
    """The worker's last message: the call's status and message, or an exception."""

    def __init__(self, status: int, message: str, error: Optional[BaseException] = None) -> None:
        self.status, self.message, self.error = status, message, error


class _Run:
    """What the worker and its callback share with the iterator; never references the
    Generation, so that dropping the Generation stops the worker."""

    def __init__(self) -> None:
        self.cancel = False
        self.pieces: "queue.SimpleQueue[Union[str, _Done]]" = queue.SimpleQueue()
        self.c_on_bytes = S.STREAM_FN(self._on_bytes)

    def _on_bytes(self, _user: Optional[int], data: int, n: int, complete_utf8: int) -> int:
        try:
            if self.cancel:
                return 1
            # complete_utf8 = 1: whole characters; 0: bytes that never form one
            self.pieces.put(ctypes.string_at(data, n).decode("utf-8", "strict" if complete_utf8 else "replace"))
            return 0
        except BaseException:  # noqa: B902 - an exception must not vanish inside ctypes
            self.cancel = True
            return 1


def _stop(run: _Run) -> None:
    run.cancel = True


class Generation(Iterator[str]):
    """The text pieces of one generation, as they are produced (see Context.generate).

    Attributes (complete once the iterator is exhausted or closed):
        tokens: the generated token ids (EOS excluded).
        text: the pieces yielded so far, joined.
        stats: a GenerateStats, or None while running.
    """

    def __init__(self, run: _Run, worker: threading.Thread, out_tokens: "ctypes.Array[S.llmm_token]",
                 stats: S.GenerateStatsStruct) -> None:
        self._run = run
        self._worker = worker
        self._out = out_tokens
        self._stats_struct = stats
        self._done = False
        self.tokens: List[int] = []
        self.text = ""
        self.stats: Optional[GenerateStats] = None
        self.tool_family: Optional[str] = None  # set by Context.chat(tools=...)
        self._finalizer = weakref.finalize(self, _stop, run)

    def __iter__(self) -> "Generation":
        return self

    def __next__(self) -> str:
        if self._done:
            raise StopIteration
        try:
            item = self._run.pieces.get()
        except BaseException:  # KeyboardInterrupt while waiting: stop the worker, then raise
            self.close()
            raise
        if isinstance(item, str):
            self.text += item
            return item
        self._finish(item)
        raise StopIteration

    def _finish(self, done: _Done) -> None:
        self._done = True
        self._worker.join()
        self._finalizer.detach()
        s = self._stats_struct
        values = {name: getattr(s, name) for name, _ in S.GenerateStatsStruct._fields_ if name != "size"}
        values["stop_reason"] = S.STOP_REASONS.get(values["stop_reason"], str(values["stop_reason"]))
        values["tool_malformed"] = bool(values["tool_malformed"])
        self.stats = GenerateStats(**values)
        self.tokens = list(self._out[:min(s.n_generated, len(self._out))])
        if done.error is not None:
            raise done.error
        our_stop = self._run.cancel and done.status == LLMM_ERR_ABORTED
        if done.status != LLMM_OK and not our_stop:
            _lib.check(done.status, done.message)

    @property
    def tool_calls(self) -> List[Any]:
        """With Context.chat(tools=...): the calls in the text so far, as OpenAI-style dicts
        (``{"id"?, "type": "function", "function": {"name", "arguments"}}``); parse(...) on
        ``text`` gives content and reasoning too. [] without tools."""
        if self.tool_family is None:
            return []
        from .tools import parse  # tools.py imports nothing of this module
        return [c.openai() for c in parse(self.tool_family, self.text).tool_calls]

    def close(self) -> None:
        """Stop the generation and wait for the worker (idempotent). Pieces not yet taken are
        added to ``text``."""
        if self._done:
            return
        self._run.cancel = True
        while True:
            item = self._run.pieces.get()
            if isinstance(item, str):
                self.text += item
            else:
                self._finish(item)
                return

    def __enter__(self) -> "Generation":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


GenerationHost = Callable[[_Run, Callable[[int], int]], Tuple[int, str]]
"""All a generation needs of its context (Context._run_generation): host(run, call) runs
call(handle) on the worker thread with the context held (its lock, its logits views released)
and run.cancel able to stop the call, and returns (status, the context's message when the
status is a failure). Raises InvalidArgError when the context is closed."""


def start_generation(host: GenerationHost, prompt: Union[str, bytes], *, max_tokens: int,
                     temperature: Optional[float], top_k: Optional[int], top_p: Optional[float],
                     min_p: Optional[float], repeat_penalty: Optional[float], seed: Optional[int],
                     stop: Sequence[str], seq: int, add_special: bool, parse_special: bool,
                     grammar: Any = None, grammar_trigger: Optional[str] = None,
                     speculation: Optional["Speculation"] = None, tool_parser: Any = None) -> Generation:
    """Check the arguments, prepare the structs and start the worker (Context.generate)."""
    lib = _lib.lib()
    data = prompt.encode("utf-8") if isinstance(prompt, str) else bytes(prompt)
    if b"\0" in data:
        raise invalid_arg("the prompt contains a NUL character")
    _unsigned("max_tokens", max_tokens, 31)
    if isinstance(stop, (str, bytes)):
        stop = [stop]  # type: ignore[list-item]
    stop_bytes = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in stop]

    sampling = sampler_params(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                              repeat_penalty=repeat_penalty, seed=seed)

    run = _Run()
    params = S.sized(S.GenerateParams)
    _lib.check(lib.llmm_generate_params_default(ctypes.byref(params), ctypes.sizeof(params)))
    params.seq = seq
    params.max_tokens = max_tokens
    params.tokenize_flags = S.tokenize_flags(add_special, parse_special)
    params.sampling = ctypes.pointer(sampling)
    stop_arr = (ctypes.c_char_p * max(len(stop_bytes), 1))(*stop_bytes)
    params.stop_strings = stop_arr
    params.n_stop = len(stop_bytes)
    params.on_bytes = run.c_on_bytes
    out_tokens = (S.llmm_token * max(max_tokens, 1))()
    params.out_tokens = out_tokens
    params.out_capacity = max_tokens
    # a grammar: GBNF text, or an object with a compiled handle (tools.Grammar)
    grammar_text = grammar.encode("utf-8") if isinstance(grammar, str) else None
    if grammar is not None and grammar_text is None:
        params.grammar = grammar.handle
    params.grammar_text = grammar_text
    trigger = grammar_trigger.encode("utf-8") if grammar_trigger is not None else None
    params.grammar_trigger = trigger
    if speculation is not None:
        speculation.fill(params)
    if tool_parser is not None:
        params.tool_parser = tool_parser.handle
    stats = S.sized(S.GenerateStatsStruct)
    # everything the library reads during the call stays referenced by the worker's closure
    keep = (data, sampling, stop_bytes, stop_arr, params, out_tokens, stats, grammar, grammar_text, trigger,
            speculation, tool_parser)

    def call(handle: int) -> int:
        return lib.llmm_generate(handle, keep[0], ctypes.byref(params), ctypes.byref(stats))

    def work() -> None:
        try:
            status, message = host(run, call)
            run.pieces.put(_Done(status, message))
        except BaseException as e:  # noqa: B902 - delivered to the iterating thread
            run.pieces.put(_Done(LLMM_OK, "", e))
        finally:
            if speculation is not None:
                speculation.release()

    worker = threading.Thread(target=work, name="llmmini-generate", daemon=True)
    worker.start()
    return Generation(run, worker, out_tokens, stats)


__all__ = ["Generation", "GenerateStats"]
