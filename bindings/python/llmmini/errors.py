"""Exceptions raised by the llmmini package.

Every failure of a library call raises a subclass of :class:`LlmminiError` chosen by the
status code the call returned; a status this package does not know (one added to a newer
library) raises :class:`LlmminiError` itself, still with its code and name.
"""
from __future__ import annotations

from typing import Dict, Optional, Type


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
    -1: InvalidArgError,
    -2: NoMemoryError,
    -3: IoError,
    -4: BadFileError,
    -5: UnsupportedError,
    -6: BufferTooSmallError,
    -7: NotFoundError,
    -8: WrongTypeError,
    -9: ContextFullError,
    -10: AbortedError,
    -11: BackendError,
    -12: VocabOnlyError,
    -13: InternalError,
}


def error_for(status: int, status_name: str, message: str) -> LlmminiError:
    """The exception for a failed call: the subclass for ``status``, or LlmminiError for a
    code this package does not know."""
    return ERRORS_BY_STATUS.get(status, LlmminiError)(status, status_name, message)


def invalid_arg(message: str) -> InvalidArgError:
    """The error for an argument this package rejects before calling the library."""
    return InvalidArgError(-1, "invalid argument", message)
