"""Finding, checking and declaring the llmmini shared library.

Lookup order: the file named by the LLMMINI_LIB environment variable; a libllmmini shared
library next to this package (a wheel or a copy may bundle one); then the system loader
(LD_LIBRARY_PATH, the ld.so cache, /usr/lib...), as ``libllmmini.so.0`` and through
``ctypes.util.find_library``. The first that loads is used and must report the ABI version
this package was written for.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import threading
from ctypes import POINTER, c_char_p, c_double, c_int, c_int32, c_size_t, c_uint32, c_void_p
from typing import List, Optional, Tuple

from . import _structs as S
from .errors import LLMM_OK, LibraryError, error_for

# The ABI version (llmm_abi_version / LLMM_ABI_VERSION) the structs in _structs.py mirror.
ABI_VERSION = 1
# The shared library's soname major (libllmmini.so.MAJOR).
SONAME_MAJOR = 0

_status = c_int
_p = c_void_p  # opaque handles
_tok_p = POINTER(S.llmm_token)

# name: (result type, argument types); the subset of the header this package calls
_PROTOTYPES = {
    "llmm_version": (c_char_p, []),
    "llmm_abi_version": (c_uint32, []),
    "llmm_status_str": (c_char_p, [_status]),
    "llmm_model_params_default": (_status, [POINTER(S.ModelParams), c_size_t]),
    "llmm_model_load": (_status, [c_char_p, POINTER(S.ModelParams), POINTER(_p)]),
    "llmm_model_free": (None, [_p]),
    "llmm_model_last_error": (c_size_t, [_p, c_void_p, c_size_t]),
    "llmm_model_get_info": (_status, [_p, POINTER(S.ModelInfoStruct)]),
    "llmm_model_meta_str": (_status, [_p, c_char_p, POINTER(c_char_p)]),
    "llmm_model_meta_int": (_status, [_p, c_char_p, POINTER(ctypes.c_int64)]),
    "llmm_model_meta_float": (_status, [_p, c_char_p, POINTER(c_double)]),
    "llmm_model_meta_count": (_status, [_p, POINTER(c_size_t)]),
    "llmm_model_meta_key": (_status, [_p, c_size_t, POINTER(c_char_p)]),
    "llmm_tokenize": (_status, [_p, c_char_p, c_size_t, c_uint32, _tok_p, c_size_t, POINTER(c_size_t)]),
    "llmm_token_to_piece": (_status, [_p, S.llmm_token, c_uint32, c_void_p, c_size_t, POINTER(c_size_t)]),
    "llmm_detokenize": (_status, [_p, _tok_p, c_size_t, c_uint32, c_void_p, c_size_t, POINTER(c_size_t)]),
    "llmm_token_attrs": (_status, [_p, S.llmm_token, POINTER(c_uint32)]),
    "llmm_model_special_token": (_status, [_p, S.c_enum, _tok_p]),
    "llmm_context_params_default": (_status, [POINTER(S.ContextParams), c_size_t]),
    "llmm_context_estimate": (_status, [_p, POINTER(S.ContextParams), POINTER(c_size_t)]),
    "llmm_context_create": (_status, [_p, POINTER(S.ContextParams), POINTER(_p)]),
    "llmm_context_free": (None, [_p]),
    "llmm_context_last_error": (c_char_p, [_p]),
    "llmm_context_get_stats": (_status, [_p, POINTER(S.ContextStatsStruct)]),
    "llmm_prefill": (_status, [_p, S.llmm_seq_id, _tok_p, c_size_t, c_uint32]),
    "llmm_decode": (_status, [_p, POINTER(S.llmm_seq_id), _tok_p, c_size_t]),
    "llmm_logits": (_status, [_p, c_size_t, POINTER(POINTER(ctypes.c_float)), POINTER(c_size_t)]),
    "llmm_seq_clear": (_status, [_p, S.llmm_seq_id]),
    "llmm_seq_truncate": (_status, [_p, S.llmm_seq_id, c_size_t]),
    "llmm_seq_length": (_status, [_p, S.llmm_seq_id, POINTER(c_size_t)]),
    "llmm_seq_create": (_status, [_p, POINTER(S.llmm_seq_id)]),
    "llmm_seq_free": (_status, [_p, S.llmm_seq_id]),
    "llmm_seq_fork": (_status, [_p, S.llmm_seq_id, POINTER(S.llmm_seq_id)]),
    "llmm_seq_save": (_status, [_p, S.llmm_seq_id, c_char_p, c_int32]),
    "llmm_seq_save_buffer": (_status, [_p, S.llmm_seq_id, c_int32, c_void_p, c_size_t, POINTER(c_size_t)]),
    "llmm_seq_load": (_status, [_p, S.llmm_seq_id, c_char_p]),
    "llmm_seq_load_buffer": (_status, [_p, S.llmm_seq_id, c_void_p, c_size_t]),
    "llmm_sampler_params_default": (_status, [POINTER(S.SamplerParams), c_size_t]),
    "llmm_generate_params_default": (_status, [POINTER(S.GenerateParams), c_size_t]),
    "llmm_generate": (_status, [_p, c_char_p, POINTER(S.GenerateParams), POINTER(S.GenerateStatsStruct)]),
    "llmm_chat_format": (_status, [_p, c_char_p, POINTER(S.ChatMessage), c_size_t, c_int, c_void_p, c_size_t,
                                   POINTER(c_size_t)]),
    "llmm_chat_template_detect": (_status, [_p, POINTER(c_char_p)]),
    "llmm_chat_template_names": (_status, [POINTER(c_char_p)]),
    "llmm_chat_request_default": (_status, [POINTER(S.ChatRequest), c_size_t]),
    "llmm_chat_tool_families": (_status, [POINTER(c_char_p)]),
    "llmm_chat_tool_family_detect": (_status, [_p, POINTER(c_char_p)]),
    "llmm_chat_tool_trigger": (_status, [c_char_p, POINTER(c_char_p)]),
    "llmm_chat_format_request": (_status, [_p, c_char_p, POINTER(S.ChatRequest), c_void_p, c_size_t,
                                           POINTER(c_size_t)]),
    "llmm_chat_parser_create": (_status, [c_char_p, c_int, POINTER(_p)]),
    "llmm_chat_parser_free": (None, [_p]),
    "llmm_chat_parser_feed": (_status, [_p, c_char_p, c_size_t]),
    "llmm_chat_parser_result": (_status, [_p, c_int, POINTER(S.ParseResult)]),
    "llmm_chat_parser_last_error": (c_char_p, [_p]),
    "llmm_chat_parser_set_tools": (_status, [_p, POINTER(S.Tool), c_size_t]),
    "llmm_grammar_create": (_status, [_p, c_char_p, c_size_t, c_char_p, POINTER(_p), c_void_p, c_size_t]),
    "llmm_grammar_from_json_schema_ws": (_status, [_p, c_char_p, c_size_t, S.c_enum, POINTER(_p), c_void_p,
                                                   c_size_t]),
    "llmm_grammar_from_tools": (_status, [_p, c_char_p, POINTER(S.Tool), c_size_t, POINTER(_p), c_void_p, c_size_t]),
    "llmm_grammar_free": (None, [_p]),
    "llmm_context_estimate_memory": (_status, [_p, POINTER(S.ContextParams), POINTER(S.ContextMemory)]),
    "llmm_sampler_create": (_status, [POINTER(S.SamplerParams), POINTER(_p)]),
    "llmm_sampler_free": (None, [_p]),
    "llmm_sampler_last_error": (c_char_p, [_p]),
    "llmm_sample": (_status, [_p, POINTER(ctypes.c_float), c_size_t, _tok_p]),
    "llmm_sampler_accept": (_status, [_p, S.llmm_token]),
    "llmm_sampler_reset": (_status, [_p]),
    "llmm_decode_sample": (_status, [_p, POINTER(S.llmm_seq_id), _tok_p, c_size_t, POINTER(_p), _tok_p]),
    "llmm_adapter_load": (_status, [_p, c_char_p, POINTER(_p)]),
    "llmm_adapter_load_memory": (_status, [_p, c_void_p, c_size_t, POINTER(_p)]),
    "llmm_adapter_free": (None, [_p]),
    "llmm_adapter_get_info": (_status, [_p, POINTER(S.AdapterInfo)]),
    "llmm_seq_set_adapters": (_status, [_p, S.llmm_seq_id, POINTER(_p), POINTER(ctypes.c_float), c_size_t]),
    "llmm_seq_get_adapters": (_status, [_p, S.llmm_seq_id, POINTER(_p), POINTER(ctypes.c_float), c_size_t,
                                        POINTER(c_size_t)]),
    "llmm_adapter_register": (_status, [_p, c_char_p, POINTER(c_int32)]),
    "llmm_seq_use_adapters": (_status, [_p, S.llmm_seq_id, POINTER(c_int32), POINTER(ctypes.c_float), c_size_t]),
    "llmm_adapter_cache_get_stats": (_status, [_p, POINTER(S.AdapterCacheStats)]),
    "llmm_adapter_cache_get_entry": (_status, [_p, c_int32, POINTER(S.AdapterCacheEntry)]),
    "llmm_speculator_params_default": (_status, [POINTER(S.SpeculatorParams), c_size_t]),
    "llmm_speculator_create": (_status, [_p, POINTER(S.SpeculatorParams), POINTER(_p)]),
    "llmm_speculator_free": (None, [_p]),
    "llmm_speculator_propose": (_status, [_p, S.llmm_seq_id, S.llmm_token, _tok_p, c_size_t, POINTER(c_size_t)]),
    "llmm_speculator_verify": (_status, [_p, POINTER(S.SpecItem), c_size_t]),
    "llmm_speculator_accept": (_status, [_p, c_size_t, _p, _tok_p, c_size_t, POINTER(c_size_t)]),
}


def candidates() -> List[Tuple[str, str]]:
    """The libraries to try, in order, as (where it came from, name or path for dlopen)."""
    found: List[Tuple[str, str]] = []
    env = os.environ.get("LLMMINI_LIB")
    if env:
        found.append(("LLMMINI_LIB", env))
    here = os.path.dirname(os.path.abspath(__file__))
    patterns = {"darwin": "libllmmini*.dylib", "win32": "llmmini*.dll"}
    for path in sorted(glob.glob(os.path.join(here, patterns.get(sys.platform, "libllmmini.so*")))):
        found.append(("next to the package", path))
    found.append(("system loader", f"libllmmini.so.{SONAME_MAJOR}"))
    by_name = ctypes.util.find_library("llmmini")
    if by_name:
        found.append(("system loader", by_name))
    return found


def _declare(lib: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def load(path: str) -> ctypes.CDLL:
    """Load the library at path (or a name for the system loader), check its ABI version and
    declare its functions. Raises LibraryError."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryError(f"cannot load {path}: {e}") from None
    try:
        lib.llmm_abi_version.restype = c_uint32
        lib.llmm_abi_version.argtypes = []
        abi = lib.llmm_abi_version()
    except AttributeError:
        raise LibraryError(f"{path} is not llmmini (no llmm_abi_version)") from None
    if abi != ABI_VERSION:
        raise LibraryError(
            f"{path} has ABI version {abi}, but this llmmini package was written for ABI version "
            f"{ABI_VERSION}: install the package that comes with that library, or point LLMMINI_LIB "
            f"at a library of ABI version {ABI_VERSION}")
    try:
        _declare(lib)
    except AttributeError as e:
        raise LibraryError(f"{path} lacks a function this package needs: {e}") from None
    return lib


_lock = threading.Lock()
_loaded: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """The library, loaded at the first call (thread-safe). Raises LibraryError."""
    global _loaded  # the process-wide handle of the loaded library, set once
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is None:
            tried = []
            for origin, path in candidates():
                try:
                    _loaded = load(path)
                    break
                except LibraryError as e:
                    # an explicit LLMMINI_LIB that fails is an error, not a reason to look elsewhere
                    if origin == "LLMMINI_LIB" or "ABI version" in e.message:
                        raise
                    tried.append(f"{origin}: {e.message}")
            else:
                raise LibraryError("libllmmini not found; set LLMMINI_LIB to its path. Tried: "
                                   + "; ".join(tried))
    return _loaded


def status_name(status: int) -> str:
    """The library's name for a status code."""
    return lib().llmm_status_str(status).decode("utf-8", "replace")


def check(status: int, message: str = "") -> None:
    """Raise the LlmminiError subclass for a failed status (no-op for LLMM_OK)."""
    if status != LLMM_OK:
        raise error_for(status, status_name(status), message)
