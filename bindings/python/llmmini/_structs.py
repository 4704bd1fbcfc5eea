"""ctypes mirrors of the structs, callbacks and constants of include/llmmini.h.

Field for field as the header declares them (tests/python/test_abi_layout.py compares every
offset and size with the C compiler's). Size-prefixed structs are filled by the library's
llmm_*_params_default with sizeof as this file defines it, so a newer library that appended
fields reads only these.
"""
from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32,
                    c_size_t, c_uint32, c_uint64, c_void_p)

# C enums are ints
c_enum = c_int

llmm_token = c_int32
llmm_seq_id = c_int32

# callbacks (the void *user argument is unused: Python closures carry the state)
LOG_FN = CFUNCTYPE(None, c_void_p, c_enum, c_char_p)
PROGRESS_FN = CFUNCTYPE(c_int, c_void_p, c_float)
ABORT_FN = CFUNCTYPE(c_int, c_void_p)
STREAM_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_int)

TOKENIZE_ADD_SPECIAL = 1
TOKENIZE_PARSE_SPECIAL = 2
PIECE_RENDER_SPECIAL = 1
PIECE_STRIP_SPACE = 2
PREFILL_ALL_LOGITS = 1

TOKENIZER_KINDS = {0: "none", 1: "spm", 2: "bpe"}
KV_TYPES = {"f32": 0, "f16": 1, "q8": 2}
BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}
SPECIAL_TOKENS = {"bos": 0, "eos": 1, "unk": 2, "pad": 3, "sep": 4, "eot": 5}
STOP_REASONS = {0: "none", 1: "max_tokens", 2: "eos", 3: "stop_string", 4: "callback",
                5: "context_full", 6: "grammar"}


class ModelParams(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("vocab_only", c_int32),
        ("use_mmap", c_int32),
        ("progress", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("log", LOG_FN),
        ("log_user", c_void_p),
        ("log_level", c_enum),
        ("allocator", c_void_p),
        ("error_buf", c_void_p),
        ("error_buf_size", c_size_t),
        ("repack_weights", c_int32),
    ]


class ModelInfoStruct(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("architecture", c_char_p),
        ("name", c_char_p),
        ("tokenizer", c_enum),
        ("vocab_only", c_int32),
        ("n_vocab", c_uint32),
        ("n_ctx_train", c_uint32),
        ("n_embd", c_uint32),
        ("n_layer", c_uint32),
        ("n_head", c_uint32),
        ("n_head_kv", c_uint32),
        ("n_ff", c_uint32),
        ("head_dim", c_uint32),
        ("n_params", c_uint64),
        ("file_bytes", c_uint64),
        ("gguf_version", c_uint32),
        ("n_tensors", c_uint32),
        ("load_ms", c_double),
    ]


class ContextParams(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("n_ctx", c_uint32),
        ("n_seq_max", c_uint32),
        ("n_threads", c_int32),
        ("n_batch", c_uint32),
        ("backend", c_enum),
        ("kv_type", c_enum),
        ("abort", ABORT_FN),
        ("abort_user", c_void_p),
        ("log", LOG_FN),
        ("log_user", c_void_p),
        ("log_level", c_enum),
        ("kv_block_size", c_uint32),
        ("n_ctx_total", c_uint32),
        ("kv_budget_bytes", c_uint64),
        ("prefix_cache", c_int32),
        ("device", c_int32),
        ("progress", PROGRESS_FN),
        ("progress_user", c_void_p),
        # since unreleased (ABI 1)
        ("adapter_budget_bytes", c_uint64),
        ("n_outputs_max", c_uint32),
    ]


class ContextMemory(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("host_bytes", c_uint64),
        ("device_bytes", c_uint64),
        ("kv_pool_bytes", c_uint64),
        ("weights_bytes", c_uint64),
        ("activations_bytes", c_uint64),
        ("scratch_bytes", c_uint64),
        ("other_host_bytes", c_uint64),
    ]


class ContextStatsStruct(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("kv_type", c_enum),
        ("block_size", c_uint32),
        ("n_seq_used", c_uint32),
        ("blocks_total", c_uint64),
        ("blocks_used", c_uint64),
        ("blocks_free", c_uint64),
        ("blocks_shared", c_uint64),
        ("blocks_cached", c_uint64),
        ("kv_bytes", c_uint64),
        ("block_bytes", c_uint64),
        ("fragmentation", c_double),
        ("tokens_prefilled", c_uint64),
        ("tokens_decoded", c_uint64),
        ("prefill_ms", c_double),
        ("decode_ms", c_double),
        ("prefix_hits", c_uint64),
        ("module_load_ms", c_double),
        ("backend_init_ms", c_double),
        ("weights_ms", c_double),
        ("warmup_ms", c_double),
        ("graph_capture_ms", c_double),
        ("first_token_ms", c_double),
        ("graphs", c_uint32),
        ("graph_replays", c_uint64),
        ("n_requests", c_uint64),
        ("request_first_token_ms_p50", c_double),
        ("request_first_token_ms_p95", c_double),
        ("request_first_token_ms_p99", c_double),
        ("request_first_token_ms_max", c_double),
        ("inter_token_ms_p50", c_double),
        ("inter_token_ms_p95", c_double),
        ("inter_token_ms_p99", c_double),
        ("inter_token_ms_max", c_double),
        ("step_ms_p50", c_double),
        ("step_ms_p95", c_double),
        ("step_ms_p99", c_double),
        ("step_ms_max", c_double),
    ]


class SamplerParams(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repeat_penalty", c_float),
        ("frequency_penalty", c_float),
        ("presence_penalty", c_float),
        ("penalty_last_n", c_int32),
        ("seed", c_uint64),
    ]


class GenerateParams(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("seq", llmm_seq_id),
        ("max_tokens", c_int32),
        ("tokenize_flags", c_uint32),
        ("sampling", POINTER(SamplerParams)),
        ("stop_strings", POINTER(c_char_p)),
        ("n_stop", c_size_t),
        ("on_bytes", STREAM_FN),
        ("user", c_void_p),
        ("out_tokens", POINTER(llmm_token)),
        ("out_capacity", c_size_t),
        # since unreleased (ABI 1)
        ("spec_draft_model", c_void_p),
        ("spec_max_tokens", c_int32),
        ("spec_ngram", c_int32),
        ("spec_min_ngram", c_int32),
        ("grammar_text", c_char_p),
        ("grammar", c_void_p),
        ("grammar_trigger", c_char_p),
        ("tool_parser", c_void_p),
    ]


class GenerateStatsStruct(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("n_prompt", c_size_t),
        ("n_generated", c_size_t),
        ("load_ms", c_double),
        ("prompt_ms", c_double),
        ("first_token_ms", c_double),
        ("generate_ms", c_double),
        ("prompt_tokens_per_s", c_double),
        ("generate_tokens_per_s", c_double),
        ("stop_reason", c_enum),
        # since unreleased (ABI 1)
        ("spec_proposed", c_uint64),
        ("spec_accepted", c_uint64),
        ("spec_acceptance", c_double),
        ("n_target_steps", c_uint64),
        ("spec_draft_ms", c_double),
        ("spec_speedup_estimate", c_double),
        ("grammar_ms", c_double),
        ("n_tool_calls", c_uint32),
        ("tool_malformed", c_int32),
        ("inter_token_ms_p50", c_double),
        ("inter_token_ms_p95", c_double),
        ("inter_token_ms_p99", c_double),
        ("inter_token_ms_max", c_double),
    ]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class Tool(Structure):
    _fields_ = [("name", c_char_p), ("description", c_char_p), ("parameters", c_char_p)]


class ToolCall(Structure):
    _fields_ = [("id", c_char_p), ("name", c_char_p), ("arguments", c_char_p)]


class ChatTurn(Structure):
    _fields_ = [
        ("role", c_char_p),
        ("content", c_char_p),
        ("tool_calls", POINTER(ToolCall)),
        ("n_tool_calls", c_size_t),
        ("tool_call_id", c_char_p),
        ("reasoning_content", c_char_p),
    ]


class ChatRequest(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("messages", POINTER(ChatTurn)),
        ("n_messages", c_size_t),
        ("tools", POINTER(Tool)),
        ("n_tools", c_size_t),
        ("add_generation_prompt", c_int32),
        ("enable_thinking", c_int32),
        ("date_string", c_char_p),
    ]


class ParsedCall(Structure):
    _fields_ = [("id", c_char_p), ("name", c_char_p), ("arguments", c_char_p), ("complete", c_int32)]


class ParseResult(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("content", c_char_p),
        ("reasoning", c_char_p),
        ("calls", POINTER(ParsedCall)),
        ("n_calls", c_size_t),
        ("malformed", c_int32),
    ]


class AdapterInfo(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("rank", c_uint32),
        ("alpha", c_float),
        ("n_tensors", c_uint32),
        ("bytes", c_uint64),
        ("fingerprint", c_uint64),
    ]


class AdapterCacheStats(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("n_registered", c_uint32),
        ("n_loaded", c_uint32),
        ("bytes", c_uint64),
        ("budget_bytes", c_uint64),
        ("hits", c_uint64),
        ("loads", c_uint64),
        ("evictions", c_uint64),
        ("load_ms", c_double),
    ]


class AdapterCacheEntry(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("path", c_char_p),
        ("loaded", c_int32),
        ("bytes", c_uint64),
        ("loads", c_uint64),
        ("hits", c_uint64),
        ("load_ms", c_double),
        ("last_load_ms", c_double),
    ]


class SpeculatorParams(Structure):
    _fields_ = [
        ("size", c_uint32),
        ("draft_model", c_void_p),
        ("max_tokens", c_int32),
        ("ngram", c_int32),
        ("min_ngram", c_int32),
        ("sampling", POINTER(SamplerParams)),
    ]


class SpecItem(Structure):
    _fields_ = [
        ("seq", llmm_seq_id),
        ("pending", llmm_token),
        ("draft", POINTER(llmm_token)),
        ("n_draft", c_size_t),
    ]


SPEC_MAX_TOKENS = 32  # LLMM_SPEC_MAX_TOKENS: guesses per sequence and round, at most


# C struct name -> mirror, for the layout test
STRUCTS = {
    "llmm_model_params": ModelParams,
    "llmm_model_info": ModelInfoStruct,
    "llmm_context_params": ContextParams,
    "llmm_context_stats": ContextStatsStruct,
    "llmm_sampler_params": SamplerParams,
    "llmm_generate_params": GenerateParams,
    "llmm_generate_stats": GenerateStatsStruct,
    "llmm_chat_message": ChatMessage,
    "llmm_tool": Tool,
    "llmm_tool_call": ToolCall,
    "llmm_chat_turn": ChatTurn,
    "llmm_chat_request": ChatRequest,
    "llmm_chat_parsed_call": ParsedCall,
    "llmm_chat_parse_result": ParseResult,
    "llmm_context_memory": ContextMemory,
    "llmm_adapter_info": AdapterInfo,
    "llmm_adapter_cache_stats": AdapterCacheStats,
    "llmm_adapter_cache_entry": AdapterCacheEntry,
    "llmm_speculator_params": SpeculatorParams,
    "llmm_spec_item": SpecItem,
}


def tokenize_flags(add_special: bool, parse_special: bool) -> int:
    """The llmm_tokenize flags for the two options (also llmm_generate_params.tokenize_flags)."""
    return (TOKENIZE_ADD_SPECIAL if add_special else 0) | (TOKENIZE_PARSE_SPECIAL if parse_special else 0)


def sized(struct_type: type) -> Structure:
    """A zeroed instance of a size-prefixed struct with its size field set."""
    s = struct_type()
    s.size = ctypes.sizeof(struct_type)
    return s
