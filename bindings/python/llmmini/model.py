"""Model: a loaded GGUF file (weights, tokenizer, metadata), shareable by threads."""
from __future__ import annotations

import ctypes
import os
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _lib
from . import _structs as S
from ._abort import sigint_routed
from ._handle import HandleOwner
from .errors import (LLMM_ERR_BUFFER_TOO_SMALL, LLMM_ERR_NOT_FOUND, LLMM_ERR_UNSUPPORTED, LLMM_ERR_WRONG_TYPE,
                     LLMM_OK, _token, _token_array, invalid_arg)

Message = Union[Mapping, Tuple[str, str]]
"""A chat message: ``{"role": ..., "content": ...}`` or a ``(role, content)`` pair."""

_ERROR_BUF_SIZE = 1024


@dataclass(frozen=True)
class ModelInfo:
    """Facts about a loaded model (``llmm_model_info``)."""

    architecture: str
    name: str
    tokenizer: str  # "spm", "bpe" or "none"
    vocab_only: bool
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim: int
    n_params: int
    file_bytes: int
    gguf_version: int
    n_tensors: int
    load_ms: float


def _free_model(lib: ctypes.CDLL, handle: int) -> None:
    lib.llmm_model_free(handle)


class _Progress:
    """The load's progress callback: calls the user's function (if any), turns its True, an
    exception or Ctrl-C into a cancel, and keeps the exception to raise after the load."""

    def __init__(self, fn: Optional[Callable[[float], Optional[bool]]]) -> None:
        self.fn = fn
        self.error: Optional[BaseException] = None
        self.c_fn = S.PROGRESS_FN(self._call)

    def on_sigint(self, _signum: int, _frame: Any) -> None:
        self.error = KeyboardInterrupt()

    def _call(self, _user: Optional[int], fraction: float) -> int:
        try:
            if self.error is not None:
                return 1
            return 1 if self.fn is not None and self.fn(fraction) else 0
        except BaseException as e:  # noqa: B902 - KeyboardInterrupt too: it must cancel the load
            self.error = e
            return 1


class Model(HandleOwner):
    """A GGUF model loaded by ``llmm_model_load``.

    Thread-safety: every method may be called from any thread at once (the model is
    immutable); any number of :class:`Context` objects on any threads may share it.

    Lifetime: ``close()`` (or leaving a ``with`` block, or garbage collection) releases the
    model; methods then raise. Contexts keep the model alive: its memory is released only
    once every context made from it is closed too.

    Args:
        path: the GGUF file.
        use_mmap: map the file (default) rather than read it into owned memory.
        vocab_only: load the tokenizer and metadata only (no contexts can be made).
        progress: optional ``fn(fraction) -> bool``; returning True cancels the load
            (AbortedError). An exception raised by it cancels the load and is re-raised.
            Ctrl-C during a load on the main thread cancels it and raises KeyboardInterrupt.
        repack_weights: let the backend keep faster copies of often read weights
            (``llmm_model_params.repack_weights``); None keeps the library's default.

    Raises:
        IoError: the file cannot be opened or read.
        BadFileError: the file is malformed (the message says what).
        UnsupportedError: unknown architecture or tokenizer.
        LibraryError: the shared library cannot be found or has another ABI version.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], *, use_mmap: bool = True,
                 vocab_only: bool = False, progress: Optional[Callable[[float], Optional[bool]]] = None,
                 repack_weights: Optional[bool] = None) -> None:
        self._lib = _lib.lib()
        self._lock = threading.Lock()
        self._closed = False
        self._what = "model"
        self._users = 0
        self._handle: Optional[int] = None
        params = S.sized(S.ModelParams)
        _lib.check(self._lib.llmm_model_params_default(ctypes.byref(params), ctypes.sizeof(params)))
        params.use_mmap = 1 if use_mmap else 0
        params.vocab_only = 1 if vocab_only else 0
        if repack_weights is not None:
            params.repack_weights = 1 if repack_weights else 0
        error_buf = ctypes.create_string_buffer(_ERROR_BUF_SIZE)
        params.error_buf = ctypes.cast(error_buf, ctypes.c_void_p)
        params.error_buf_size = _ERROR_BUF_SIZE
        callback = _Progress(progress)
        params.progress = callback.c_fn
        handle = ctypes.c_void_p()
        with sigint_routed(callback.on_sigint):
            status = self._lib.llmm_model_load(os.fsencode(path), ctypes.byref(params), ctypes.byref(handle))
        if callback.error is not None:
            if handle.value:
                self._lib.llmm_model_free(handle)
            raise callback.error
        _lib.check(status, error_buf.value.decode("utf-8", "replace"))
        self._handle = handle.value
        self._finalizer = weakref.finalize(self, _free_model, self._lib, self._handle)
        self.path = os.fspath(path)
        self._metadata: Optional[Metadata] = None

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Release the model (idempotent). Contexts still open keep it alive until they close."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            free_now = self._users == 0
        if free_now and self._handle is not None:
            self._finalizer()

    def _acquire(self) -> int:
        """A context starts using the handle. Raises if the model is closed."""
        with self._lock:
            if self._closed:
                raise invalid_arg("the model is closed")
            self._users += 1
            return self._handle  # type: ignore[return-value]

    def _release(self) -> None:
        """A context stopped using the handle; frees it if the model was closed meanwhile."""
        with self._lock:
            self._users -= 1
            free_now = self._closed and self._users == 0
        if free_now:
            self._finalizer()

    def _check(self, status: int) -> None:
        """Raise for a failed call on this model, with the model's last message."""
        if status != LLMM_OK:
            buf = ctypes.create_string_buffer(_ERROR_BUF_SIZE)
            self._lib.llmm_model_last_error(self._handle, buf, _ERROR_BUF_SIZE)
            _lib.check(status, buf.value.decode("utf-8", "replace"))

    # ------------------------------------------------------------------ facts

    @property
    def info(self) -> ModelInfo:
        """Architecture, sizes and load time (``llmm_model_get_info``)."""
        s = S.sized(S.ModelInfoStruct)
        self._check(self._lib.llmm_model_get_info(self._h(), ctypes.byref(s)))
        values: Dict[str, Any] = {}
        for name, _ in S.ModelInfoStruct._fields_:
            if name == "size":
                continue
            v = getattr(s, name)
            if name in ("architecture", "name"):
                v = (v or b"").decode("utf-8", "replace")
            elif name == "tokenizer":
                v = S.TOKENIZER_KINDS.get(v, str(v))
            elif name == "vocab_only":
                v = bool(v)
            values[name] = v
        return ModelInfo(**values)

    @property
    def metadata(self) -> "Metadata":
        """The GGUF metadata as a read-only mapping of key to str, int or float."""
        if self._metadata is None:
            self._metadata = Metadata(self)
        return self._metadata

    def special_token(self, which: str) -> Optional[int]:
        """The id of a special token ("bos", "eos", "unk", "pad", "sep", "eot"), or None when
        the model defines none."""
        if which not in S.SPECIAL_TOKENS:
            raise invalid_arg(f"special token {which!r}: one of {list(S.SPECIAL_TOKENS)}")
        out = S.llmm_token()
        status = self._lib.llmm_model_special_token(self._h(), S.SPECIAL_TOKENS[which], ctypes.byref(out))
        if status == LLMM_ERR_NOT_FOUND:
            return None
        self._check(status)
        return out.value

    # ------------------------------------------------------------------ tokens

    def tokenize(self, text: Union[str, bytes], add_special: bool = True, parse_special: bool = False) -> List[int]:
        """Token ids of text (str, or bytes taken as they are). add_special adds BOS/EOS as the
        model's metadata asks; parse_special turns text such as "<s>" into control tokens."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        flags = S.tokenize_flags(add_special, parse_special)
        n = ctypes.c_size_t()
        capacity = len(data) + 8
        while True:
            ids = (S.llmm_token * capacity)()
            status = self._lib.llmm_tokenize(self._h(), data, len(data), flags, ids, capacity, ctypes.byref(n))
            if status == LLMM_ERR_BUFFER_TOO_SMALL and n.value > capacity:
                capacity = n.value
                continue
            self._check(status)
            return ids[:n.value]

    def token_to_piece(self, token: int, render_special: bool = False) -> bytes:
        """The bytes a token stands for (may be part of a UTF-8 character)."""
        flags = S.PIECE_RENDER_SPECIAL if render_special else 0
        return self._sized_bytes(lambda buf, cap, n: self._lib.llmm_token_to_piece(
            self._h(), _token(token), flags, buf, cap, n), 32)

    def detokenize(self, ids: Sequence[int], render_special: bool = False,
                   strip_space: Optional[bool] = None, errors: str = "replace") -> str:
        """The text of token ids. strip_space drops one leading space (the SPM space prefix);
        None strips it for SPM models, so ``detokenize(tokenize(t, add_special=False)) == t``.
        Bytes that are not UTF-8 decode per ``errors`` (as bytes.decode)."""
        if strip_space is None:
            strip_space = self.info.tokenizer == "spm"
        flags = (S.PIECE_RENDER_SPECIAL if render_special else 0) | (S.PIECE_STRIP_SPACE if strip_space else 0)
        arr = _token_array(ids)
        data = self._sized_bytes(lambda buf, cap, n: self._lib.llmm_detokenize(
            self._h(), arr, len(arr), flags, buf, cap, n), 8 * len(arr) + 16)
        return data.decode("utf-8", errors)

    def _sized_bytes(self, call: Callable[[Any, int, Any], int], capacity: int) -> bytes:
        """Run a call that fills a byte buffer, growing it once on BUFFER_TOO_SMALL."""
        n = ctypes.c_size_t()
        while True:
            buf = ctypes.create_string_buffer(max(capacity, 1))
            status = call(buf, capacity, ctypes.byref(n))
            if status == LLMM_ERR_BUFFER_TOO_SMALL and n.value > capacity:
                capacity = n.value
                continue
            self._check(status)
            return buf.raw[:n.value]

    # ------------------------------------------------------------------ chat

    def chat_format(self, messages: Sequence[Message], template: Optional[str] = None,
                    add_generation_prompt: bool = True, *, tools: Optional[Sequence[Mapping]] = None,
                    tool_family: Optional[str] = None, enable_thinking: Optional[bool] = None,
                    date_string: Optional[str] = None) -> str:
        """The prompt text a chat model expects for messages (``llmm_chat_format``), in the
        format of the model's chat template or the built-in one named by template (see
        :func:`chat_template_names`). Tokenize it with ``parse_special=True``.
        Raises UnsupportedError when the model has no template of a built-in family.

        With tools, or tool_family, messages are OpenAI-style dicts that may carry tool_calls
        and tool results, rendered as the family's own template does
        (``llmm_chat_format_request``; tool_family None: the model's, :attr:`tool_family`)."""
        if tools is not None or tool_family is not None:
            from .tools import format_request
            return format_request(self._h(), messages, tools or (), tool_family, add_generation_prompt,
                                  enable_thinking, date_string, self._last_error_text)
        encoded = [_message(m) for m in messages]
        arr = (S.ChatMessage * max(len(encoded), 1))(*[S.ChatMessage(r, c) for r, c in encoded])
        name = template.encode("utf-8") if template is not None else None
        data = self._sized_bytes(lambda buf, cap, n: self._lib.llmm_chat_format(
            self._h(), name, arr, len(encoded), 1 if add_generation_prompt else 0, buf, cap, n),
            sum(len(r) + len(c) for r, c in encoded) + 256)
        return data.decode("utf-8", "replace")

    def _last_error_text(self) -> str:
        buf = ctypes.create_string_buffer(512)
        self._lib.llmm_model_last_error(self._h(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    @property
    def tool_family(self) -> Optional[str]:
        """The tool family of the model's template (``llmm_chat_tool_family_detect``), or None."""
        out = ctypes.c_char_p()
        status = self._lib.llmm_chat_tool_family_detect(self._h(), ctypes.byref(out))
        if status == LLMM_ERR_UNSUPPORTED:
            return None
        self._check(status)
        return out.value.decode("utf-8") if out.value else None

    @property
    def chat_template(self) -> Optional[str]:
        """The built-in chat format the model's template maps to, or None."""
        out = ctypes.c_char_p()
        status = self._lib.llmm_chat_template_detect(self._h(), ctypes.byref(out))
        if status == LLMM_ERR_UNSUPPORTED:  # no template, or none built in
            return None
        self._check(status)
        return out.value.decode("utf-8") if out.value else None

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<llmmini.Model {self.path!r} {state}>"


class Metadata(Mapping):
    """The model's GGUF metadata, read-only: string, integer (and bool) and float values.
    Array values (such as ``tokenizer.ggml.tokens``) are not exposed by the C API and are
    left out. Thread-safe."""

    def __init__(self, model: Model) -> None:
        self._model = model
        lib, h = model._lib, model._h()
        count = ctypes.c_size_t()
        model._check(lib.llmm_model_meta_count(h, ctypes.byref(count)))
        keys = []
        for i in range(count.value):
            key = ctypes.c_char_p()
            model._check(lib.llmm_model_meta_key(h, i, ctypes.byref(key)))
            keys.append(key.value.decode("utf-8", "replace"))
        self._values: Dict[str, Any] = {}
        for k in keys:
            v = self._read(k)
            if v is not None:
                self._values[k] = v

    def _read(self, key: str) -> Any:
        lib, h, k = self._model._lib, self._model._h(), key.encode("utf-8")
        s = ctypes.c_char_p()
        status = lib.llmm_model_meta_str(h, k, ctypes.byref(s))
        if status == LLMM_OK:
            return s.value.decode("utf-8", "replace")
        i = ctypes.c_int64()
        status = lib.llmm_model_meta_int(h, k, ctypes.byref(i))
        if status == LLMM_OK:
            return i.value
        f = ctypes.c_double()
        status = lib.llmm_model_meta_float(h, k, ctypes.byref(f))
        if status == LLMM_OK:
            return f.value
        if status == LLMM_ERR_WRONG_TYPE:  # an array
            return None
        self._model._check(status)
        return None

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def chat_template_names() -> List[str]:
    """The names of the built-in chat formats (``llmm_chat_template_names``)."""
    lib = _lib.lib()
    out = ctypes.c_char_p()
    _lib.check(lib.llmm_chat_template_names(ctypes.byref(out)))
    return [n for n in out.value.decode("utf-8").split(",") if n]


def _message(m: Message) -> Tuple[bytes, bytes]:
    if isinstance(m, Mapping):
        role, content = m.get("role"), m.get("content")
    elif isinstance(m, (tuple, list)) and len(m) == 2:
        role, content = m
    else:
        raise invalid_arg(f"a chat message is a dict or (role, content) pair, not {m!r}")
    if not isinstance(role, str) or not isinstance(content, str):
        raise invalid_arg(f"a chat message needs str role and content: {m!r}")
    return role.encode("utf-8"), content.encode("utf-8")


__all__ = ["Model", "ModelInfo", "Metadata", "Message", "chat_template_names"]
