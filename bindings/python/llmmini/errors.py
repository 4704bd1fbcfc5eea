"""Exceptions raised by the llmmini package.

Every failure of a library call raises a subclass of :class:`LlmminiError` chosen by the
status code the call returned; a status this package does not know (one added to a newer
library) raises :class:`LlmminiError` itself, still with its code and name.

Also, for the package's own modules: the ``llmm_status`` codes of include/llmmini.h by their C
names (every status the package compares is written with them), and the argument checks that
raise InvalidArgError before a value reaches C (``_unsigned``, ``_token``, ``_token_array``).
They live here because the exceptions are keyed by the codes and the checks raise them; a
module of their own would import this one while this one imports it. They are not part of
the public API (``llmmini.__all__``)."""
from __future__ import annotations

import ctypes
from typing import Dict, Optional, Sequence, Type

from ._structs import llmm_token

# llmm_status (include/llmmini.h; tests/python/test_abi_layout.py compares them with the header)
LLMM_OK = 0
LLMM_ERR_INVALID_ARG = -1
LLMM_ERR_NO_MEMORY = -2
LLMM_ERR_IO = -3
LLMM_ERR_BAD_FILE = -4
LLMM_ERR_UNSUPPORTED = -5
LLMM_ERR_BUFFER_TOO_SMALL = -6
LLMM_ERR_NOT_FOUND = -7
LLMM_ERR_WRONG_TYPE = -8
LLMM_ERR_CONTEXT_FULL = -9
LLMM_ERR_ABORTED = -10
LLMM_ERR_BACKEND = -11
LLMM_ERR_VOCAB_ONLY = -12
LLMM_ERR_INTERNAL = -13
LLMM_ERR_NUMERICAL = -14  # no subclass yet: raises LlmminiError itself


class LlmminiError(Exception):
    """A llmmini call failed.

    Attributes:
        status: the ``llmm_status`` code (negative), or ``None`` for a failure of the
            package itself (such as :class:`LibraryError`).
        status_name: the library's name of the code (``llmm_status_str``), e.g.
            ``"invalid argument"``.
        message: the library's detailed message for this failure ("" when it gave none).
    """

    def __init__(self, status: Optional[int], status_name: str, message: str = "") -> None:
        self.status = status
        self.status_name = status_name
        self.message = message
        super().__init__(f"{status_name}: {message}" if message else status_name)


class InvalidArgError(LlmminiError, ValueError):
    """LLMM_ERR_INVALID_ARG: a bad argument (also raised for values this package rejects
    before calling the library, such as a negative count)."""


class NoMemoryError(LlmminiError, MemoryError):
    """LLMM_ERR_NO_MEMORY: an allocation failed."""


class IoError(LlmminiError, OSError):
    """LLMM_ERR_IO: a file could not be opened, mapped, read or written."""


class BadFileError(LlmminiError):
    """LLMM_ERR_BAD_FILE: a model or state file is malformed; the message says what."""


class UnsupportedError(LlmminiError):
    """LLMM_ERR_UNSUPPORTED: valid input that this build of the library cannot handle."""


class BufferTooSmallError(LlmminiError):
    """LLMM_ERR_BUFFER_TOO_SMALL (the package sizes its buffers, so this means a bug)."""


class NotFoundError(LlmminiError, LookupError):
    """LLMM_ERR_NOT_FOUND: no such metadata key, token, logits row or sequence."""


class WrongTypeError(LlmminiError, TypeError):
    """LLMM_ERR_WRONG_TYPE: a metadata key holds another type."""


class ContextFullError(LlmminiError):
    """LLMM_ERR_CONTEXT_FULL: the sequence or the KV pool has no room left."""


class AbortedError(LlmminiError):
    """LLMM_ERR_ABORTED: a callback (the context's abort event, a progress callback) stopped
    the call. The sequence is left as it was before the call."""


class BackendError(LlmminiError):
    """LLMM_ERR_BACKEND: the compute backend failed or is not available."""


class VocabOnlyError(LlmminiError):
    """LLMM_ERR_VOCAB_ONLY: the model was loaded with ``vocab_only=True``."""


class InternalError(LlmminiError):
    """LLMM_ERR_INTERNAL: a bug in llmmini."""


class LibraryError(LlmminiError, ImportError):
    """The shared library could not be found or loaded, or its ABI version is not the one
    this package was written for. ``status`` is ``None``."""

    def __init__(self, message: str) -> None:
        super().__init__(None, "library", message)


ERRORS_BY_STATUS: Dict[int, Type[LlmminiError]] = {
    LLMM_ERR_INVALID_ARG: InvalidArgError,
    LLMM_ERR_NO_MEMORY: NoMemoryError,
    LLMM_ERR_IO: IoError,
    LLMM_ERR_BAD_FILE: BadFileError,
    LLMM_ERR_UNSUPPORTED: UnsupportedError,
    LLMM_ERR_BUFFER_TOO_SMALL: BufferTooSmallError,
    LLMM_ERR_NOT_FOUND: NotFoundError,
    LLMM_ERR_WRONG_TYPE: WrongTypeError,
    LLMM_ERR_CONTEXT_FULL: ContextFullError,
    LLMM_ERR_ABORTED: AbortedError,
    LLMM_ERR_BACKEND: BackendError,
    LLMM_ERR_VOCAB_ONLY: VocabOnlyError,
    LLMM_ERR_INTERNAL: InternalError,
}


def error_for(status: int, status_name: str, message: str) -> LlmminiError:
    """The exception for a failed call: the subclass for ``status``, or LlmminiError for a
    code this package does not know."""
    return ERRORS_BY_STATUS.get(status, LlmminiError)(status, status_name, message)


def invalid_arg(message: str) -> InvalidArgError:
    """The error for an argument this package rejects before calling the library."""
    return InvalidArgError(LLMM_ERR_INVALID_ARG, "invalid argument", message)


def _unsigned(name: str, value: int, bits: int = 32) -> int:
    """value checked to fit a C unsigned field of that many bits."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < (1 << bits):
        raise invalid_arg(f"{name} must be an int in 0..{(1 << bits) - 1}, not {value!r}")
    return value


_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def _token(t: int) -> int:
    """t as an llmm_token, rejecting what C would silently wrap."""
    if isinstance(t, bool) or not isinstance(t, int):
        try:
            t = t.__index__()  # numpy integers
        except AttributeError:
            raise invalid_arg(f"a token id is an int, not {type(t).__name__}") from None
    if not _INT32_MIN <= t <= _INT32_MAX:
        raise invalid_arg(f"token id {t} out of range")
    return t


def _token_array(ids: Sequence[int]) -> "ctypes.Array[llmm_token]":
    """ids checked (``_token``) as a C array of llmm_token."""
    return (llmm_token * len(ids))(*[_token(t) for t in ids])
