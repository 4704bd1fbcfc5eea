"""stories260K greedy generations through the package equal the reference engine's tokens."""
from __future__ import annotations

import os
import unittest

import llmmini
from support import golden_ids, golden_logits, shared

# the CUDA backend's kernels emulated on the CPU (make test builds it): the CUDA code path
CUDA_EMU = os.path.join(os.environ.get("LLMM_BUILD", "build"), "libllmmini-cuda-emu.so")

# (model file, golden case, prompt, tokens that are a hard reference): tests/support/golden_check.c
CASES = [
    ("stories260K.gguf", "stories260K.f32.once", "Once upon a time", 64),
    ("stories260K.gguf", "stories260K.f32.dog", "The little dog", 64),
    ("stories260K.gguf", "stories260K.f32.empty", "", 64),
    ("stories260K-q8_0.gguf", "stories260K.q8_0.once", "Once upon a time", 64),
    ("stories260K-q4_0.gguf", "stories260K.q4_0.once", "Once upon a time", 57),
]


class GoldenTest(unittest.TestCase):
    def test_generate_equals_golden_tokens(self) -> None:
        for model_file, case, prompt, hard in CASES:
            with self.subTest(case=case), llmmini.Model(shared("models", model_file)) as model, \
                    llmmini.Context(model, n_ctx=128, kv_type="f32") as ctx:
                golden = golden_ids(case)
                self.assertEqual(model.tokenize(prompt), golden["prompt"])
                gen = ctx.generate(prompt, max_tokens=hard, temperature=0)
                text = "".join(gen)
                self.assertEqual(gen.tokens, golden["generated"][:hard])
                self.assertEqual(gen.stats.n_generated, hard)
                self.assertEqual(gen.stats.stop_reason, "max_tokens")
                self.assertEqual(text, gen.text)
                self.assertEqual(text, model.detokenize(gen.tokens, strip_space=False))

    def test_prefill_decode_logits_argmax_equals_golden(self) -> None:
        golden = golden_ids("stories260K.f32.once")
        reference = golden_logits("stories260K.f32.once")
        with llmmini.Model(shared("models", "stories260K.gguf")) as model, \
                llmmini.Context(model, n_ctx=128, kv_type="f32") as ctx:
            ctx.prefill(golden["prompt"])
            row = ctx.logits(0)
            self.assertEqual(len(row), len(reference))
            self.assertLess(max(abs(a - b) for a, b in zip(row, reference)), 1e-3)
            out = []
            for _ in range(len(golden["generated"])):
                row = ctx.logits(0)
                best = max(range(len(row)), key=lambda i: (row[i], -i))  # lowest id on ties
                out.append(best)
                ctx.decode([best])
            self.assertEqual(out, golden["generated"])
            self.assertEqual(ctx.seq_length(0), len(golden["prompt"]) + len(out))

    @unittest.skipUnless(os.path.exists(CUDA_EMU), "needs the emulated CUDA module (make test builds it)")
    def test_cuda_backend_through_the_emulated_module(self) -> None:
        golden = golden_ids("stories260K.f32.once")
        os.environ["LLMM_CUDA_MODULE"] = os.path.abspath(CUDA_EMU)
        try:
            with llmmini.Model(shared("models", "stories260K.gguf")) as model, \
                    llmmini.Context(model, n_ctx=128, kv_type="f32", backend="cuda") as ctx:
                gen = ctx.generate("Once upon a time", max_tokens=16, temperature=0)
                "".join(gen)
                self.assertEqual(gen.tokens, golden["generated"][:16])
        finally:
            del os.environ["LLMM_CUDA_MODULE"]


if __name__ == "__main__":
    unittest.main()
