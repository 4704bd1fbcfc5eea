"""Tool calling and grammars from Python: OpenAI-style dicts rendered byte-identical to the
reference (../shared/chat), outputs parsed, calls constrained to their schemas, JSON Schema
generation returning parsed objects."""
from __future__ import annotations

import json
import os
import unittest

import llmmini
from support import shared as shared_path

CONV = shared_path("chat", "conversations.json")


def case(name: str):
    with open(CONV, encoding="utf-8") as f:
        conv = json.load(f)
    c = next(c for c in conv["cases"] if c["name"] == name)
    return c["messages"], (conv["tools"] if c["use_tools"] else [])


class RenderTest(unittest.TestCase):
    def test_openai_dicts_render_like_the_reference(self) -> None:
        with llmmini.Model(shared_path("models", "stories260K.gguf"), vocab_only=True) as model:
            for family in ("qwen2_5", "qwen3", "granite4", "llama3_1", "mistral_nemo"):
                for name in ("tools", "tool_result", "two_calls"):
                    path = shared_path("chat", "render", f"{family}.{name}.txt")
                    if not os.path.exists(path):
                        continue
                    messages, tools = case(name)
                    with open(path, encoding="utf-8", newline="") as f:
                        want = f.read()
                    got = model.chat_format(messages, tools=tools, tool_family=family)
                    self.assertEqual(got, want, f"{family}.{name}")

    def test_families_and_refusals(self) -> None:
        self.assertIn("qwen2_5", llmmini.tool_families())
        self.assertEqual(llmmini.tool_trigger("mistral_nemo"), "[TOOL_CALLS]")
        with llmmini.Model(shared_path("models", "stories260K.gguf"), vocab_only=True) as model:
            self.assertIsNone(model.tool_family)
            bad = [{"type": "function", "function": {"name": "x", "parameters": "[1]"}}]
            with self.assertRaises(llmmini.InvalidArgError):
                model.chat_format([{"role": "user", "content": "hi"}], tools=bad, tool_family="qwen2_5")


class ParseTest(unittest.TestCase):
    def test_reference_parses(self) -> None:
        for family in ("qwen2_5", "qwen3", "llama3_1", "mistral_nemo"):
            with open(shared_path("chat", "parse", f"{family}.3.json"), encoding="utf-8") as f:
                d = json.load(f)
            got = llmmini.parse(family, d["raw"])
            want = d["final"]
            self.assertEqual(got.content, want["content"])
            self.assertEqual([c.name for c in got.tool_calls], [c["name"] for c in want["tool_calls"]])
            self.assertEqual([c.json() for c in got.tool_calls],
                             [json.loads(c["arguments"]) for c in want["tool_calls"]])

    def test_qwen3_5_values_typed_by_the_tools(self) -> None:
        raw = "<tool_call>\n<function=set_timer>\n<parameter=minutes>\n10\n</parameter>\n<parameter=label>\n10\n" \
              "</parameter>\n</function>\n</tool_call>"
        _, tools = case("tools")
        self.assertEqual(llmmini.parse("qwen3_5", raw, tools=tools).tool_calls[0].json(), {"minutes": 10, "label": "10"})
        self.assertEqual(llmmini.parse("qwen3_5", raw).tool_calls[0].json(), {"minutes": 10, "label": 10})
        with self.assertRaises(llmmini.InvalidArgError):
            llmmini.ChatParser("qwen3_5", tools=[{"type": "function", "function": {"name": "bad name"}}])

    def test_streaming(self) -> None:
        p = llmmini.ChatParser("qwen2_5")
        p.feed("Sure.\n<tool_c")
        self.assertEqual(p.result().content, "Sure.\n")
        p.feed('all>\n{"name": "set_timer", "arguments": {"minutes": 1')
        r = p.result()
        self.assertEqual(r.tool_calls[0].name, "set_timer")
        self.assertFalse(r.tool_calls[0].complete)
        p.close()


class ConstrainedTest(unittest.TestCase):
    TOOLS = [{"type": "function", "function": {"name": "set_timer", "description": "Start a timer.",
              "parameters": {"type": "object", "properties": {"minutes": {"type": "integer", "minimum": 1,
                                                                          "maximum": 120}},
                             "required": ["minutes"]}}}]

    def test_required_call_validates(self) -> None:
        with llmmini.Model(shared_path("models", "stories260K.gguf")) as model, \
                llmmini.Context(model, n_ctx=1024, threads=1) as ctx:
            for seed in range(5):
                gen = ctx.chat([{"role": "user", "content": "Set a timer for ten minutes"}], tools=self.TOOLS,
                               tool_choice="required", tool_family="qwen2_5", temperature=1.0, seed=seed,
                               max_tokens=200)
                text = "".join(gen)
                self.assertEqual(len(gen.tool_calls), 1, text)
                call = gen.tool_calls[0]["function"]
                self.assertEqual(call["name"], "set_timer")
                self.assertTrue(1 <= json.loads(call["arguments"])["minutes"] <= 120)
                self.assertEqual(gen.stats.stop_reason, "grammar")
                self.assertEqual(gen.stats.n_tool_calls, 1)  # the library's own parse, fed as it streamed
                self.assertFalse(gen.stats.tool_malformed)

    def test_required_calls_in_every_argument_syntax(self) -> None:
        with llmmini.Model(shared_path("models", "stories260K.gguf")) as model, \
                llmmini.Context(model, n_ctx=1024, threads=1) as ctx:
            for family in ("lfm2_5", "qwen3_5", "gemma4"):
                gen = ctx.chat([{"role": "user", "content": "Set a timer for ten minutes"}], tools=self.TOOLS,
                               tool_choice="required", tool_family=family, temperature=1.0, seed=3, max_tokens=200)
                text = "".join(gen)
                self.assertEqual(len(gen.tool_calls), 1, text)
                self.assertTrue(1 <= json.loads(gen.tool_calls[0]["function"]["arguments"])["minutes"] <= 120)

    def test_generate_feeds_a_tool_parser(self) -> None:
        with llmmini.Model(shared_path("models", "stories260K.gguf")) as model, \
                llmmini.Context(model, n_ctx=512, threads=1) as ctx:
            parser = llmmini.ChatParser("qwen2_5")
            gen = ctx.generate("Once upon a time", max_tokens=20, temperature=0, tool_parser=parser)
            text = "".join(gen)
            parsed = parser.result(final=True)
            self.assertEqual(parsed.content, text)
            self.assertEqual(parsed.tool_calls, [])
            self.assertEqual(gen.stats.n_tool_calls, 0)

    def test_json_schema_generation_parses(self) -> None:
        schema = {"type": "object", "properties": {"days": {"type": "integer", "minimum": 1, "maximum": 7}},
                  "required": ["days"]}
        with llmmini.Model(shared_path("models", "stories260K.gguf")) as model, \
                llmmini.Context(model, n_ctx=512, threads=1) as ctx:
            gen = ctx.generate("Once upon a time", json_schema=schema, temperature=1.0, seed=3, max_tokens=200)
            obj = json.loads("".join(gen))
            self.assertTrue(1 <= obj["days"] <= 7)
            gen = ctx.generate("Once upon a time", grammar='root ::= "yes" | "no"', temperature=1.0, seed=1)
            self.assertIn("".join(gen), ("yes", "no"))


if __name__ == "__main__":
    unittest.main()
