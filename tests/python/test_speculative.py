"""Speculative decoding from Python: prompt lookup and a draft model keep greedy output token for
token, their statistics, and the refusals."""
from __future__ import annotations

import unittest

import llmmini
from support import ModelTestCase, shared

# a prompt that repeats itself, so that prompt lookup finds something to propose
PROMPT = "Ben and Mia found a big box. They have a big box. They have a"


class SpeculativeTest(ModelTestCase):
    def plain(self, ctx: llmmini.Context) -> llmmini.Generation:
        gen = ctx.generate(PROMPT, max_tokens=40, temperature=0)
        list(gen)
        return gen

    def test_prompt_lookup_keeps_greedy_output(self) -> None:
        with llmmini.Context(self.model, n_ctx=256) as ctx:
            plain = self.plain(ctx)
            self.assertEqual(plain.stats.spec_proposed, 0)
            gen = ctx.generate(PROMPT, max_tokens=40, temperature=0, spec_ngram=3, spec_max_tokens=4)
            text = "".join(gen)
            self.assertEqual(gen.tokens, plain.tokens)
            self.assertEqual(text, plain.text)
            s = gen.stats
            self.assertGreater(s.spec_proposed, 0)
            self.assertLessEqual(s.spec_accepted, s.spec_proposed)
            self.assertAlmostEqual(s.spec_acceptance, s.spec_accepted / s.spec_proposed)
            self.assertGreater(s.n_target_steps, 0)
            # kept guesses save target steps
            self.assertLessEqual(s.n_target_steps, s.n_generated)

    def test_draft_model_keeps_greedy_output(self) -> None:
        draft = llmmini.Model(shared("models", "stories260K-q8_0.gguf"))
        with llmmini.Context(self.model, n_ctx=256) as ctx:
            plain = self.plain(ctx)
            gen = ctx.generate(PROMPT, max_tokens=40, temperature=0, draft_model=draft)
            draft.close()  # the running generation holds the draft until it ends
            self.assertEqual("".join(gen), plain.text)
            self.assertEqual(gen.tokens, plain.tokens)
            self.assertGreater(gen.stats.spec_proposed, 0)
            self.assertGreater(gen.stats.spec_accepted, 0)
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.generate(PROMPT, draft_model=draft)  # closed

    def test_refusals(self) -> None:
        other = llmmini.Model(shared("models", "llama-2-tiny-random.gguf"))
        with llmmini.Context(self.model, n_ctx=128) as ctx:
            with self.assertRaises(llmmini.InvalidArgError):
                list(ctx.generate(PROMPT, max_tokens=4, draft_model=other))  # another vocabulary
            with self.assertRaises(llmmini.InvalidArgError):
                list(ctx.generate(PROMPT, max_tokens=4, spec_ngram=2, grammar='root ::= "a"'))
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.generate(PROMPT, spec_ngram=-1)
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.generate(PROMPT, draft_model="draft.gguf")  # type: ignore[arg-type]
            with self.assertRaises(llmmini.InvalidArgError):
                list(ctx.generate(PROMPT, max_tokens=4, spec_ngram=2, spec_max_tokens=1000))
        other.close()


if __name__ == "__main__":
    unittest.main()
