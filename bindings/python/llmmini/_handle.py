"""What every object owning a library handle shares: close() as a context manager, the closed
flag, and the check that the handle is still open."""
from __future__ import annotations

from typing import Any, TypeVar

from .errors import invalid_arg

_Self = TypeVar("_Self", bound="HandleOwner")


class HandleOwner:
    """Base of Model and Context: subclasses set _closed, _handle and _what, and define
    close() (idempotent)."""

    _closed: bool
    _handle: Any
    _what: str

    def close(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closed

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _h(self) -> Any:
        """The handle, or InvalidArgError once closed."""
        if self._closed:
            raise invalid_arg(f"the {self._what} is closed")
        return self._handle
