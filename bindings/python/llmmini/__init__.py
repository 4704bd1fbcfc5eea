"""llmmini: Python bindings over the llmmini C library (ctypes; no compiler needed).

Quick start::

    import llmmini
    with llmmini.Model("stories260K.gguf") as model, llmmini.Context(model, n_ctx=256) as ctx:
        for piece in ctx.generate("Once upon a time", max_tokens=32, temperature=0):
            print(piece, end="", flush=True)

The shared library is found through LLMMINI_LIB, next to this package, then the system
loader (see llmmini._lib); it must have the ABI version this package was written for.
"""
from __future__ import annotations

from . import _lib
from .adapter import MAX_SEQ_ADAPTERS, Adapter, AdapterCacheEntry, AdapterCacheStats, AdapterInfo
from .batch import Batch
from .context import Context, ContextMemory, ContextStats
from .errors import (AbortedError, BackendError, BadFileError, BufferTooSmallError, ContextFullError,
                     InternalError, InvalidArgError, IoError, LibraryError, LlmminiError, NoMemoryError,
                     NotFoundError, UnsupportedError, VocabOnlyError, WrongTypeError)
from .generate import GenerateStats, Generation
from .model import Metadata, Model, ModelInfo, chat_template_names
from .sampler import Sampler
from .speculator import Speculator
from .tools import ChatParse, ChatParser, Grammar, ParsedToolCall, parse, tool_families, tool_trigger

__version__ = "0.1.0"

ABI_VERSION = _lib.ABI_VERSION


def library_version() -> str:
    """The loaded library's version ("MAJOR.MINOR.PATCH"). Raises LibraryError."""
    return _lib.lib().llmm_version().decode("ascii")


def library_path() -> str:
    """The file or name the library was loaded from. Raises LibraryError."""
    return _lib.lib()._name


__all__ = [
    "Model", "ModelInfo", "Metadata", "Context", "ContextStats", "ContextMemory", "Generation", "GenerateStats",
    "Adapter", "AdapterInfo", "AdapterCacheStats", "AdapterCacheEntry", "MAX_SEQ_ADAPTERS", "Sampler", "Batch", "Speculator",
    "chat_template_names", "library_version", "library_path", "ABI_VERSION",
    "Grammar", "ChatParser", "ChatParse", "ParsedToolCall", "parse", "tool_families", "tool_trigger",
    "LlmminiError", "LibraryError", "InvalidArgError", "NoMemoryError", "IoError", "BadFileError",
    "UnsupportedError", "BufferTooSmallError", "NotFoundError", "WrongTypeError", "ContextFullError",
    "AbortedError", "BackendError", "VocabOnlyError", "InternalError",
]
