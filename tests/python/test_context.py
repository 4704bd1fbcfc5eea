"""Context: sequences (fork, clear, truncate, save/load as bytes and files), logits views,
stats, and the lifetime rules (context managers, idempotent close, GC, the Context keeping its
Model alive)."""
from __future__ import annotations

import gc
import os
import tempfile
import unittest
import weakref

import llmmini
from support import MODEL, ModelTestCase


class ContextTest(ModelTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.prompt = cls.model.tokenize("Once upon a time, there was a dog")

    def test_fork_clear_truncate(self) -> None:
        with llmmini.Context(self.model, n_ctx=64, n_seq_max=4, kv_type="f32") as ctx:
            ctx.prefill(self.prompt)
            base = list(ctx.logits())
            child = ctx.fork(0)
            self.assertNotEqual(child, 0)
            self.assertEqual(ctx.seq_length(child), len(self.prompt))
            self.assertGreater(ctx.stats.blocks_shared, 0)
            # both continue with the same token: the same logits
            ctx.decode([42, 42], seqs=[0, child])
            self.assertEqual(list(ctx.logits(0)), list(ctx.logits(1)))
            ctx.truncate(child, len(self.prompt) - 1)
            self.assertEqual(ctx.seq_length(child), len(self.prompt) - 1)
            ctx.decode([self.prompt[-1]], seqs=[child])
            self.assertEqual(list(ctx.logits(0)), base)
            ctx.clear(child)
            self.assertEqual(ctx.seq_length(child), 0)
            ctx.seq_free(child)
            ids = {ctx.seq_create() for _ in range(3)}
            self.assertEqual(len(ids), 3)
            with self.assertRaises(llmmini.ContextFullError):
                ctx.seq_create()

    def test_save_load_bytes_and_file(self) -> None:
        with llmmini.Context(self.model, n_ctx=64, n_seq_max=3) as ctx:
            ctx.prefill(self.prompt)
            state = ctx.save(0)
            self.assertIsInstance(state, bytes)
            ctx.decode([42])
            expected = bytes(ctx.logits())
            ctx.load(state, seq=1)
            self.assertEqual(ctx.seq_length(1), len(self.prompt))
            ctx.decode([42], seqs=[1])
            self.assertEqual(bytes(ctx.logits()), expected)  # bit for bit
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "seq.state")
                self.assertIsNone(ctx.save(0, path, level=5))
                ctx.load(path, seq=2)
                self.assertEqual(ctx.seq_length(2), len(self.prompt) + 1)
            ctx.load(bytearray(state), seq=2)
            self.assertEqual(ctx.seq_length(2), len(self.prompt))

    def test_logits_view_is_released_by_the_next_step(self) -> None:
        with llmmini.Context(self.model, n_ctx=64) as ctx:
            ctx.prefill(self.prompt)
            view = ctx.logits()
            self.assertEqual(view.format, "f")
            self.assertTrue(view.readonly)
            self.assertEqual(len(view), self.model.info.n_vocab)
            kept = list(view)
            ctx.decode([42])
            with self.assertRaises(ValueError):
                view[0]
            self.assertEqual(len(kept), self.model.info.n_vocab)
            last = ctx.logits()
        with self.assertRaises(ValueError):
            last[0]

    def test_logits_array_with_numpy(self) -> None:
        try:
            import numpy
        except ImportError:
            self.skipTest("numpy is not installed")
        with llmmini.Context(self.model, n_ctx=64) as ctx:
            ctx.prefill(self.prompt)
            arr = ctx.logits_array()
            self.assertEqual(arr.dtype, numpy.float32)
            self.assertEqual(list(arr), list(ctx.logits()))

    def test_stats(self) -> None:
        with llmmini.Context(self.model, n_ctx=64, kv_type="q8") as ctx:
            ctx.prefill(self.prompt)
            ctx.decode([42])
            s = ctx.stats
            self.assertEqual(s.kv_type, "q8")
            self.assertEqual(s.tokens_prefilled, len(self.prompt))
            self.assertEqual(s.tokens_decoded, 1)
            self.assertGreater(s.blocks_used, 0)
            self.assertGreater(s.prefill_ms, 0)

    def test_context_keeps_model_alive(self) -> None:
        model = llmmini.Model(MODEL)
        ctx = llmmini.Context(model, n_ctx=32)
        model.close()  # deferred: the context still uses it
        self.assertTrue(model.closed)
        self.assertTrue(model._finalizer.alive)
        ctx.prefill([1, 2, 3])
        gen = ctx.generate("Once", max_tokens=4, temperature=0)
        self.assertTrue("".join(gen))
        self.assertEqual(len(gen.tokens), 4)
        ctx.close()
        self.assertFalse(model._finalizer.alive)  # freed with its last context

    def test_garbage_collection_frees_handles(self) -> None:
        model = llmmini.Model(MODEL)
        ctx = llmmini.Context(model, n_ctx=32)
        model_finalizer, ctx_finalizer = model._finalizer, ctx._finalizer
        model_ref = weakref.ref(model)
        del model  # the context holds it
        gc.collect()
        self.assertIsNotNone(model_ref())
        self.assertTrue(model_finalizer.alive)
        ctx.prefill([1, 2])
        view = ctx.logits()
        del ctx
        gc.collect()
        self.assertTrue(ctx_finalizer.alive)  # the view keeps the context
        del view
        gc.collect()
        self.assertFalse(ctx_finalizer.alive)
        self.assertFalse(model_finalizer.alive)
        self.assertIsNone(model_ref())

    def test_context_managers(self) -> None:
        with llmmini.Model(MODEL) as model:
            with llmmini.Context(model, n_ctx=32) as ctx:
                ctx.prefill([1])
            self.assertTrue(ctx.closed)
        self.assertTrue(model.closed)
        self.assertFalse(model._finalizer.alive)


if __name__ == "__main__":
    unittest.main()
