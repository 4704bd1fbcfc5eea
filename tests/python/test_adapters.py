"""LoRA adapters from Python: loading (file and bytes), info, per-sequence attach and hot swap
against the reference engine's greedy continuations (lora/golden.tsv), and the adapter cache."""
from __future__ import annotations

import os
import unittest
from typing import Dict, Tuple

import llmmini
from support import ModelTestCase, shared

R8 = shared("lora", "stories260K-lora-r8.gguf")
R4 = shared("lora", "stories260K-lora-r4-attn-f16.gguf")
PROMPT = "Once upon a time"


def reference() -> Dict[Tuple[str, str], str]:
    """(adapters spec, prompt) -> the reference's greedy continuation, newlines as text."""
    out = {}
    with open(shared("lora", "golden.tsv"), encoding="utf-8") as f:
        next(f)
        for line in f:
            spec, prompt, text = line.rstrip("\n").split("\t")
            out[(spec, prompt)] = text.replace("\\n", "\n")
    return out


class AdapterTest(ModelTestCase):
    def greedy(self, ctx: llmmini.Context, seq: int = 0, n: int = 24) -> str:
        return "".join(ctx.generate(PROMPT, max_tokens=n, temperature=0, seq=seq))

    def test_info_from_file_and_bytes(self) -> None:
        with llmmini.Adapter(self.model, R8) as a, open(R8, "rb") as f:
            b = llmmini.Adapter(self.model, f.read())
            self.assertEqual(a.info.rank, 8)
            self.assertGreater(a.info.n_tensors, 0)
            self.assertGreater(a.info.bytes, 0)
            self.assertEqual(a.info, b.info)  # same tensors, same fingerprint
            b.close()
            b.close()  # idempotent
            with self.assertRaises(llmmini.InvalidArgError):
                b.info
        with llmmini.Adapter(self.model, R4) as c:
            self.assertEqual(c.info.rank, 4)

    def test_refusals(self) -> None:
        with self.assertRaises(llmmini.BadFileError):
            llmmini.Adapter(self.model, shared("models", "stories260K.gguf"))  # a model, not an adapter
        with self.assertRaises(llmmini.IoError):
            llmmini.Adapter(self.model, "/nonexistent/adapter.gguf")
        with self.assertRaises(llmmini.BadFileError):
            llmmini.Adapter(self.model, b"GGUF not really")
        with llmmini.Adapter(self.model, R8) as a, llmmini.Context(self.model, n_ctx=64) as ctx:
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.set_adapters(0, [a, a])  # repeated
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.set_adapters(0, [(a, float("nan"))])
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.set_adapters(0, ["r8"])  # type: ignore[list-item]
            self.assertEqual(ctx.adapters(0), [])  # unchanged by the failures

    def test_matches_the_reference_and_swaps_per_sequence(self) -> None:
        golden = reference()
        with llmmini.Adapter(self.model, R8) as r8, llmmini.Adapter(self.model, R4) as r4, \
                llmmini.Context(self.model, n_ctx=128, n_seq_max=2, kv_type="f32") as ctx:
            plain = self.greedy(ctx)
            self.assertTrue(golden[("none", PROMPT)].startswith(plain), plain)
            ctx.set_adapters(1, [r8])
            self.assertEqual(ctx.adapters(1), [(r8, 1.0)])
            self.assertEqual(ctx.adapters(0), [])  # other sequences untouched
            with_r8 = self.greedy(ctx, seq=1)
            self.assertTrue(golden[("stories260K-lora-r8.gguf:1", PROMPT)].startswith(with_r8), with_r8)
            self.assertNotEqual(with_r8, plain)
            self.assertEqual(self.greedy(ctx, seq=0), plain)
            # hot swap: another adapter, then none, on the same sequence
            ctx.set_adapters(1, [(r4, 0.5)])
            self.assertEqual(ctx.adapters(1), [(r4, 0.5)])
            ctx.set_adapters(1, [])
            self.assertEqual(self.greedy(ctx, seq=1), plain)
            # the sequence keeps an adapter whose Python object was closed
            ctx.set_adapters(1, [r8])
            r8.close()
            self.assertEqual(self.greedy(ctx, seq=1), with_r8)

    def test_adapter_cache(self) -> None:
        r8_bytes = llmmini.Adapter(self.model, R8).info.bytes
        with llmmini.Context(self.model, n_ctx=64, n_seq_max=2, adapter_budget_bytes=r8_bytes) as ctx:
            a = ctx.register_adapter(R8)
            b = ctx.register_adapter(R4)
            self.assertEqual(ctx.register_adapter(R8), a)  # same path, same id
            self.assertNotEqual(a, b)
            entry = ctx.adapter_cache_entry(a)
            self.assertEqual(entry.path, R8)
            self.assertFalse(entry.loaded)
            ctx.use_adapters(0, [a])
            self.assertEqual([s for _, s in ctx.adapters(0)], [1.0])
            self.assertIsNone(ctx.adapters(0)[0][0])  # loaded by the cache, not a Python Adapter
            ctx.use_adapters(0, [])
            ctx.use_adapters(0, [a])  # loaded already: a hit
            ctx.use_adapters(1, [(b, 0.5)])  # over budget, but a is in use: nothing evicted
            stats = ctx.adapter_cache_stats
            self.assertEqual(stats.n_registered, 2)
            self.assertEqual(stats.budget_bytes, r8_bytes)
            self.assertEqual(stats.loads, 2)
            self.assertEqual(stats.hits, 1)
            self.assertEqual(stats.n_loaded, 2)  # both in use: neither may be evicted
            ctx.use_adapters(0, [])
            ctx.use_adapters(1, [])
            ctx.use_adapters(0, [b])  # a hit; a is over budget and unused now
            stats = ctx.adapter_cache_stats
            self.assertGreaterEqual(stats.evictions, 1)
            self.assertFalse(ctx.adapter_cache_entry(a).loaded)
            self.assertTrue(ctx.adapter_cache_entry(b).loaded)
            with self.assertRaises(llmmini.NotFoundError):
                ctx.adapter_cache_entry(99)
            bad = ctx.register_adapter("/nonexistent/x.gguf")
            with self.assertRaises(llmmini.IoError):
                ctx.use_adapters(1, [bad])


if __name__ == "__main__":
    unittest.main()
