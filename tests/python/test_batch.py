"""Several sequences generating together (generate_batch over decode_sample), the Sampler, and
the memory estimate."""
from __future__ import annotations

import unittest

import llmmini
from support import ModelTestCase

PROMPTS = ["Once upon a time", "Ben and Mia found a", "The cat"]


class BatchTest(ModelTestCase):
    def test_greedy_batch_equals_each_generation_alone(self) -> None:
        with llmmini.Context(self.model, n_ctx=128, n_seq_max=3, kv_type="f32") as ctx:
            alone = []
            for p in PROMPTS:
                gen = ctx.generate(p, max_tokens=24, temperature=0)
                alone.append(("".join(gen), gen.tokens))
            batch = ctx.generate_batch(PROMPTS, max_tokens=24, temperature=0)
            pieces = {i: "" for i in range(3)}
            for i, piece in batch:
                pieces[i] += piece
            for i in range(3):
                self.assertEqual(batch.tokens[i], alone[i][1], PROMPTS[i])
                self.assertEqual(batch.texts[i], pieces[i])
                self.assertEqual(batch.texts[i], alone[i][0])
                self.assertIn(batch.stop_reasons[i], ("max_tokens", "eos"))
            self.assertEqual(list(batch), [])

    def test_sampled_batch_is_seeded_per_sequence(self) -> None:
        with llmmini.Context(self.model, n_ctx=128, n_seq_max=4) as ctx:
            a = ctx.generate_batch(PROMPTS[:2], max_tokens=20, seed=5, temperature=1.0, seqs=[3, 1])
            list(a)
            b = ctx.generate_batch(PROMPTS[:2], max_tokens=20, seed=5, temperature=1.0)
            list(b)
            self.assertEqual(a.tokens, b.tokens)  # the seeds, not the sequence ids, decide
            self.assertEqual(a.seqs, [3, 1])
            c = ctx.generate_batch([PROMPTS[1]], max_tokens=20, seed=6, temperature=1.0)
            list(c)
            self.assertEqual(c.tokens[0], a.tokens[1])  # prompt 1 of a drew with seed 5 + 1

    def test_close_and_refusals(self) -> None:
        with llmmini.Context(self.model, n_ctx=128, n_seq_max=2) as ctx:
            batch = ctx.generate_batch(PROMPTS[:2], max_tokens=50, temperature=0)
            next(batch)
            batch.close()
            self.assertEqual(batch.stop_reasons, ["callback", "callback"])
            self.assertEqual(list(batch), [])
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.generate_batch([])
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.generate_batch(PROMPTS[:2], seqs=[0, 0])
            with self.assertRaises(llmmini.InvalidArgError):
                list(ctx.generate_batch(PROMPTS, max_tokens=4))  # 3 sequences, n_seq_max 2
        with llmmini.Context(self.model, n_ctx=16, n_seq_max=2) as ctx:
            batch = ctx.generate_batch(PROMPTS[:2], max_tokens=100, temperature=0)
            list(batch)
            self.assertEqual(batch.stop_reasons, ["context_full", "context_full"])

    def test_decode_sample_and_sampler(self) -> None:
        with llmmini.Context(self.model, n_ctx=64, n_seq_max=2) as ctx, llmmini.Sampler(temperature=0) as greedy:
            ids = self.model.tokenize(PROMPTS[0])
            ctx.prefill(ids, seq=0)
            ctx.prefill(ids, seq=1)
            first = greedy.sample(ctx.logits(0))
            row = list(ctx.logits(0))
            self.assertEqual(first, row.index(max(row)))
            out = ctx.decode_sample([first, first], greedy)
            self.assertEqual(out[0], out[1])  # same tokens, same greedy choice
            self.assertEqual(out[0], greedy.sample(ctx.logits(1)))  # the logits stay readable
            with llmmini.Sampler(temperature=1.0, seed=3) as s1, llmmini.Sampler(temperature=1.0, seed=3) as s2:
                drawn = ctx.decode_sample(out, [s1, s2], seqs=[0, 1])
                self.assertEqual(drawn[0], drawn[1])  # equal rows, equal seeds: equal draws
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.decode_sample([1, 2], [greedy])
            with self.assertRaises(llmmini.InvalidArgError):
                greedy.sample([float("-inf")] * 4)
            greedy.accept(5)
            greedy.reset()
        s = llmmini.Sampler()
        s.close()
        with self.assertRaises(llmmini.InvalidArgError):
            s.sample([0.0, 1.0])
        with self.assertRaises(llmmini.InvalidArgError):
            llmmini.Sampler(top_k=-1)


class MemoryTest(ModelTestCase):
    def test_estimate_splits_and_grows(self) -> None:
        small = llmmini.Context.estimate_memory(self.model, n_ctx=64, backend="cpu")
        big = llmmini.Context.estimate_memory(self.model, n_ctx=512, n_seq_max=4, backend="cpu")
        self.assertEqual(small.device_bytes, 0)
        self.assertEqual(small.total, small.host_bytes)
        self.assertEqual(small.total, small.kv_pool_bytes + small.weights_bytes + small.activations_bytes +
                         small.scratch_bytes + small.other_host_bytes)
        self.assertGreater(big.kv_pool_bytes, small.kv_pool_bytes)
        with self.assertRaises(llmmini.InvalidArgError):
            llmmini.Context.estimate_memory(self.model, kv_block_size=3)
        with self.assertRaises(llmmini.InvalidArgError):
            llmmini.Context.estimate_memory(self.model, kv_type="f8")
        with llmmini.Context(self.model, n_ctx=64, backend="cpu", n_outputs_max=4) as ctx:
            self.assertEqual(ctx.stats.kv_bytes, small.kv_pool_bytes)


if __name__ == "__main__":
    unittest.main()
