"""Tool calling and grammars: requests with tools rendered in a model family's own syntax
(``llmm_chat_format_request``), model output parsed back into content, reasoning and calls
(``llmm_chat_parser_*``), and compiled grammars (GBNF, JSON Schema, tool calls).

Messages and tools are the dicts OpenAI-style chat APIs take::

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "...",
              "parameters": {"type": "object", "properties": {...}}}}]
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call12345",
                 "type": "function", "function": {"name": "get_weather",
                 "arguments": "{\\"location\\": \\"Paris\\"}"}}]},
                {"role": "tool", "tool_call_id": "call12345", "content": "{\\"temperature\\": 18}"}]
"""
from __future__ import annotations

import ctypes
import json
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _lib
from . import _structs as S
from .errors import LLMM_ERR_BUFFER_TOO_SMALL, LLMM_OK, invalid_arg

ToolSpec = Mapping[str, Any]


def _text(value: Any, what: str) -> Optional[bytes]:
    if value is None:
        return None
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    if not isinstance(value, str):
        raise invalid_arg(f"{what} must be a str, not {value!r}")
    return value.encode("utf-8")


def _tool_fields(tool: ToolSpec) -> Tuple[Optional[bytes], Optional[bytes], Optional[bytes]]:
    if not isinstance(tool, Mapping):
        raise invalid_arg(f"a tool is a dict, not {tool!r}")
    fn = tool.get("function", tool)
    if not isinstance(fn, Mapping):
        raise invalid_arg(f"a tool's function is a dict, not {fn!r}")
    return _text(fn.get("name"), "a tool's name"), _text(fn.get("description"), "a tool's description"), \
        _text(fn.get("parameters"), "a tool's parameters")


def encode_tools(tools: Sequence[ToolSpec]) -> "ctypes.Array[S.Tool]":
    """The llmm_tool array of OpenAI-style tool dicts (the array keeps its strings alive)."""
    fields = [_tool_fields(t) for t in tools]
    arr = (S.Tool * max(len(fields), 1))(*[S.Tool(*f) for f in fields])
    arr._keep = fields  # type: ignore[attr-defined]
    return arr


def _encode_call(call: Mapping[str, Any]) -> S.ToolCall:
    if not isinstance(call, Mapping):
        raise invalid_arg(f"a tool call is a dict, not {call!r}")
    fn = call.get("function", call)
    return S.ToolCall(_text(call.get("id"), "a call's id"), _text(fn.get("name"), "a call's name"),
                      _text(fn.get("arguments", "{}"), "a call's arguments"))


def encode_messages(messages: Sequence[Any]) -> "ctypes.Array[S.ChatTurn]":
    """The llmm_chat_turn array of OpenAI-style message dicts (or (role, content) pairs)."""
    turns, keep = [], []
    for m in messages:
        if isinstance(m, (tuple, list)) and len(m) == 2:
            m = {"role": m[0], "content": m[1]}
        if not isinstance(m, Mapping):
            raise invalid_arg(f"a chat message is a dict or (role, content) pair, not {m!r}")
        calls = [_encode_call(c) for c in (m.get("tool_calls") or [])]
        call_arr = (S.ToolCall * max(len(calls), 1))(*calls)
        keep.append(call_arr)
        turns.append(S.ChatTurn(_text(m.get("role"), "a message's role"), _text(m.get("content"), "content"),
                                call_arr if calls else None, len(calls), _text(m.get("tool_call_id"), "tool_call_id"),
                                _text(m.get("reasoning_content"), "reasoning_content")))
    arr = (S.ChatTurn * max(len(turns), 1))(*turns)
    arr._keep = keep  # type: ignore[attr-defined]
    return arr


def tool_families() -> List[str]:
    """The tool families llmmini renders or parses (``llmm_chat_tool_families``)."""
    out = ctypes.c_char_p()
    _lib.check(_lib.lib().llmm_chat_tool_families(ctypes.byref(out)))
    return [n for n in out.value.decode("utf-8").split(",") if n]


def tool_trigger(family: str) -> str:
    """The text that opens a call in the family's output (a lazy grammar's trigger)."""
    out = ctypes.c_char_p()
    _lib.check(_lib.lib().llmm_chat_tool_trigger(family.encode("utf-8"), ctypes.byref(out)), family)
    return out.value.decode("utf-8")


def format_request(model_handle: Optional[int], messages: Sequence[Any], tools: Sequence[ToolSpec] = (),
                   family: Optional[str] = None, add_generation_prompt: bool = True,
                   enable_thinking: Optional[bool] = None, date_string: Optional[str] = None,
                   last_error: Any = None) -> str:
    """Internal: ``llmm_chat_format_request`` (Model.chat_format with tools=...)."""
    lib = _lib.lib()
    msgs, tool_arr = encode_messages(messages), encode_tools(tools)
    req = S.sized(S.ChatRequest)
    _lib.check(lib.llmm_chat_request_default(ctypes.byref(req), ctypes.sizeof(req)))
    req.messages, req.n_messages = msgs, len(messages)
    req.tools, req.n_tools = (tool_arr if tools else None), len(tools)
    req.add_generation_prompt = 1 if add_generation_prompt else 0
    if enable_thinking is not None:
        req.enable_thinking = 1 if enable_thinking else 0
    date = date_string.encode("utf-8") if date_string is not None else None
    req.date_string = date
    name = family.encode("utf-8") if family is not None else None
    need = ctypes.c_size_t()
    status = lib.llmm_chat_format_request(model_handle, name, ctypes.byref(req), None, 0, ctypes.byref(need))
    if status == LLMM_ERR_BUFFER_TOO_SMALL:
        buf = ctypes.create_string_buffer(need.value + 1)
        status = lib.llmm_chat_format_request(model_handle, name, ctypes.byref(req), buf, len(buf),
                                              ctypes.byref(need))
        if status == LLMM_OK:
            return buf.raw[:need.value].decode("utf-8", "replace")
    _lib.check(status, last_error() if last_error and status != LLMM_OK else "the request was refused")
    return ""


@dataclass(frozen=True)
class ParsedToolCall:
    """One call found in a model's output. arguments is JSON text as the model wrote it;
    complete is False while (or when) the call was cut off."""

    name: str
    arguments: str
    id: Optional[str] = None
    complete: bool = True

    def json(self) -> Any:
        """The arguments as a Python value (json.loads; raises ValueError when incomplete)."""
        return json.loads(self.arguments)

    def openai(self) -> Dict[str, Any]:
        """The call as an OpenAI-style dict ({"id", "type": "function", "function": {...}})."""
        out: Dict[str, Any] = {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(frozen=True)
class ChatParse:
    """A model's output split by the family's syntax: content, reasoning, calls; malformed
    when text after a call's marker was no call (the reference engine refuses such output)."""

    content: str
    reasoning: str
    tool_calls: List[ParsedToolCall] = field(default_factory=list)
    malformed: bool = False


class ChatParser:
    """A streaming parser of a model's output in a tool family's syntax
    (``llmm_chat_parser_*``): feed text as it comes, read the parse so far at any time.
    tools (OpenAI-style dicts, those the prompt offered) type qwen3_5's values: a parameter whose
    schema says string stays a string ("10" stays "10")."""

    def __init__(self, family: str, thinking: bool = False, tools: Optional[Sequence[ToolSpec]] = None) -> None:
        self._lib = _lib.lib()
        h = ctypes.c_void_p()
        _lib.check(self._lib.llmm_chat_parser_create(family.encode("utf-8"), 1 if thinking else 0,
                                                     ctypes.byref(h)), f"tool family {family!r}")
        self._handle = h.value
        self._finalizer = weakref.finalize(self, self._lib.llmm_chat_parser_free, self._handle)
        self.family = family
        if tools:
            self.set_tools(tools)

    def set_tools(self, tools: Sequence[ToolSpec]) -> None:
        """The tools the prompt offered (``llmm_chat_parser_set_tools``; empty forgets them)."""
        arr = encode_tools(tools)
        st = self._lib.llmm_chat_parser_set_tools(self._handle, arr, len(tools))
        _lib.check(st, self._lib.llmm_chat_parser_last_error(self._handle).decode("utf-8", "replace"))

    @property
    def handle(self) -> int:
        """The ``llmm_chat_parser *`` (for ``llmm_generate_params.tool_parser``)."""
        return self._handle

    def feed(self, text: Union[str, bytes]) -> None:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        _lib.check(self._lib.llmm_chat_parser_feed(self._handle, data, len(data)))

    def result(self, final: bool = False) -> ChatParse:
        """The parse so far; final=True when the output has ended (nothing held back)."""
        r = S.sized(S.ParseResult)
        _lib.check(self._lib.llmm_chat_parser_result(self._handle, 1 if final else 0, ctypes.byref(r)))
        calls = [ParsedToolCall(c.name.decode("utf-8", "replace"), c.arguments.decode("utf-8", "replace"),
                                c.id.decode("utf-8", "replace") if c.id else None, bool(c.complete))
                 for c in r.calls[:r.n_calls]]
        return ChatParse(r.content.decode("utf-8", "replace"), r.reasoning.decode("utf-8", "replace"), calls,
                         bool(r.malformed))

    def close(self) -> None:
        self._finalizer()


def parse(family: str, text: Union[str, bytes], thinking: bool = False,
          tools: Optional[Sequence[ToolSpec]] = None) -> ChatParse:
    """The final parse of a whole output (tools: see ChatParser)."""
    p = ChatParser(family, thinking, tools)
    try:
        p.feed(text)
        return p.result(final=True)
    finally:
        p.close()


class Grammar:
    """A compiled grammar for a model's vocabulary (``llmm_grammar``), for
    ``Context.generate(grammar=...)``. Build one with :meth:`from_gbnf`, :meth:`from_json_schema`
    or :meth:`from_tools`; the model must stay open while it is used."""

    def __init__(self, handle: int) -> None:
        self._handle = handle
        self._finalizer = weakref.finalize(self, _lib.lib().llmm_grammar_free, handle)

    @staticmethod
    def _make(build: Any) -> "Grammar":
        h = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        status = build(ctypes.byref(h), err, len(err))
        _lib.check(status, err.value.decode("utf-8", "replace"))
        return Grammar(h.value)

    @classmethod
    def from_gbnf(cls, model: Any, gbnf: str, root: str = "root") -> "Grammar":
        data = gbnf.encode("utf-8")
        return cls._make(lambda out, err, n: _lib.lib().llmm_grammar_create(
            model._h(), data, len(data), root.encode("utf-8"), out, err, n))

    @classmethod
    def from_json_schema(cls, model: Any, schema: Union[str, Mapping[str, Any]],
                         whitespace: str = "compact") -> "Grammar":
        """JSON valid against schema; whitespace "compact" (none between tokens) or "free"."""
        if whitespace not in ("compact", "free"):
            raise invalid_arg(f"whitespace is 'compact' or 'free', not {whitespace!r}")
        data = _text(schema, "a JSON schema") or b""
        ws = 0 if whitespace == "compact" else 1
        return cls._make(lambda out, err, n: _lib.lib().llmm_grammar_from_json_schema_ws(
            model._h(), data, len(data), ws, out, err, n))

    @classmethod
    def from_tools(cls, model: Any, tools: Sequence[ToolSpec], family: Optional[str] = None) -> "Grammar":
        """Exactly one call, in the family's syntax, to one of tools, arguments valid."""
        arr = encode_tools(tools)
        name = family.encode("utf-8") if family is not None else None
        return cls._make(lambda out, err, n: _lib.lib().llmm_grammar_from_tools(
            model._h(), name, arr, len(tools), out, err, n))

    @property
    def handle(self) -> int:
        return self._handle

    def close(self) -> None:
        self._finalizer()


__all__ = ["ChatParse", "ChatParser", "Grammar", "ParsedToolCall", "parse", "tool_families", "tool_trigger"]
