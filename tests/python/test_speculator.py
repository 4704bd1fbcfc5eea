"""The low-level speculator from Python (llmmini.Speculator): rounds of propose / verify / accept
run by hand give plain greedy decoding's tokens, with prompt lookup, a draft model and the app's
own guesses, for one sequence and for two in one verify step; and the refusals."""
from __future__ import annotations

import unittest
from typing import List, Optional

import llmmini
from support import ModelTestCase, shared

# a prompt that repeats itself, so that prompt lookup finds something to propose
PROMPT = "Ben and Mia found a big box. They have a big box. They have a"
N = 40


class SpeculatorTest(ModelTestCase):
    def greedy(self, ctx: llmmini.Context, prompt: str = PROMPT) -> List[int]:
        gen = ctx.generate(prompt, max_tokens=N, temperature=0)
        list(gen)
        self.assertEqual(len(gen.tokens), N)  # stories260K does not stop early here
        return gen.tokens

    def start(self, ctx: llmmini.Context, seq: int, sampler: llmmini.Sampler, prompt: str = PROMPT) -> int:
        """Prefill the prompt into seq; the first token, chosen and accepted (the pending one)."""
        ctx.clear(seq)
        ctx.prefill(self.model.tokenize(prompt), seq=seq)
        token = sampler.sample(ctx.logits(0))
        sampler.accept(token)
        return token

    def run_rounds(self, ctx: llmmini.Context, spec: llmmini.Speculator,
                   guesses_for: Optional[List[int]] = None) -> List[int]:
        """Rounds on sequence 0 until N tokens: the proposer's guesses, or the next few of
        guesses_for (the app's own) when given."""
        sampler = llmmini.Sampler(temperature=0)
        tokens = [self.start(ctx, 0, sampler)]
        while len(tokens) < N:
            if guesses_for is None:
                guesses = spec.propose(0, tokens[-1], max_tokens=4)
            else:
                guesses = guesses_for[len(tokens):len(tokens) + 3]
            spec.verify([(0, tokens[-1], guesses)])
            rows = [ctx.logits(r) for r in range(1 + len(guesses))]  # readable until accept
            self.assertEqual(len(rows[-1]), self.model.info.n_vocab)
            kept = spec.accept(0, sampler)
            self.assertTrue(1 <= len(kept) <= 1 + len(guesses))
            self.assertEqual(kept[:-1], guesses[:len(kept) - 1])  # a prefix of the guesses
            tokens.extend(kept)
        return tokens[:N]

    def test_prompt_lookup_rounds_keep_greedy_output(self) -> None:
        with llmmini.Context(self.model, n_ctx=256) as ctx:
            plain = self.greedy(ctx)
            with llmmini.Speculator(ctx, ngram=3, max_tokens=4) as spec:
                self.assertEqual(self.run_rounds(ctx, spec), plain)
                self.assertTrue(spec.propose(0, plain[0]) or True)  # callable again after the rounds
            self.assertTrue(spec.closed)

    def test_draft_model_proposes_and_keeps_greedy_output(self) -> None:
        draft = llmmini.Model(shared("models", "stories260K-q8_0.gguf"))
        with llmmini.Context(self.model, n_ctx=256) as ctx:
            plain = self.greedy(ctx)
            spec = llmmini.Speculator(ctx, draft_model=draft, max_tokens=4)
            draft.close()  # the speculator holds the draft until it closes
            sampler = llmmini.Sampler(temperature=0)
            pending = self.start(ctx, 0, sampler)
            guesses = spec.propose(0, pending)
            self.assertTrue(1 <= len(guesses) <= 4)
            # a q8_0 copy of the target guesses what the target chooses, mostly
            self.assertEqual(guesses[0], plain[1])
            spec.verify([(0, pending, guesses)])
            self.assertGreaterEqual(len(spec.accept(0, sampler)), 2)
            self.assertEqual(self.run_rounds(ctx, spec), plain)
            spec.close()
            spec.close()  # idempotent

    def test_app_guesses(self) -> None:
        with llmmini.Context(self.model, n_ctx=256) as ctx, llmmini.Speculator(ctx) as spec:
            plain = self.greedy(ctx)
            self.assertEqual(spec.propose(0, plain[0]), [])  # no proposer
            # right guesses are all kept (fewer rounds); wrong ones none, and the output is the same
            self.assertEqual(self.run_rounds(ctx, spec, guesses_for=plain), plain)
            wrong = [(t + 1) % self.model.info.n_vocab for t in plain]
            self.assertEqual(self.run_rounds(ctx, spec, guesses_for=wrong), plain)

    def test_two_sequences_in_one_verify(self) -> None:
        other_prompt = "Once upon a time"
        with llmmini.Context(self.model, n_ctx=256, n_seq_max=2) as ctx:
            plain = [self.greedy(ctx), self.greedy(ctx, other_prompt)]
            with llmmini.Speculator(ctx, ngram=2, max_tokens=3) as spec:
                samplers = [llmmini.Sampler(temperature=0) for _ in range(2)]
                tokens = [[self.start(ctx, 0, samplers[0])], [self.start(ctx, 1, samplers[1], other_prompt)]]
                while min(len(t) for t in tokens) < N:
                    # sequence 1 brings the target's own continuation as guesses: all kept
                    items = [(0, tokens[0][-1], spec.propose(0, tokens[0][-1])),
                             (1, tokens[1][-1], plain[1][len(tokens[1]):len(tokens[1]) + 2])]
                    spec.verify(items)
                    for i in range(2):
                        kept = spec.accept(i, samplers[i])
                        if i == 1 and len(tokens[1]) + 2 < N:
                            self.assertEqual(len(kept), 3)
                        tokens[i].extend(kept)
                self.assertEqual(tokens[0][:N], plain[0])
                self.assertEqual(tokens[1][:N], plain[1])

    def test_refusals(self) -> None:
        other = llmmini.Model(shared("models", "llama-2-tiny-random.gguf"))
        with llmmini.Context(self.model, n_ctx=128) as ctx:
            with self.assertRaises(llmmini.InvalidArgError):
                llmmini.Speculator(ctx, draft_model=other)  # another vocabulary
            self.assertEqual(other._users, 0)  # given back by the failed creation
            with self.assertRaises(llmmini.InvalidArgError):
                llmmini.Speculator("ctx")  # type: ignore[arg-type]
            with self.assertRaises(llmmini.InvalidArgError):
                llmmini.Speculator(ctx, max_tokens=1000)
            with self.assertRaises(llmmini.InvalidArgError):
                llmmini.Speculator(ctx, ngram=-1)
            spec = llmmini.Speculator(ctx, ngram=2)
            sampler = llmmini.Sampler(temperature=0)
            pending = self.start(ctx, 0, sampler)
            with self.assertRaises(llmmini.InvalidArgError):
                spec.accept(0, sampler)  # no verify yet
            with self.assertRaises(llmmini.InvalidArgError):
                spec.verify((0, pending, []))  # type: ignore[arg-type]  # an item, not a list
            with self.assertRaises(llmmini.InvalidArgError):
                spec.verify([(0, pending, [1] * 33)])
            with self.assertRaises(llmmini.InvalidArgError):
                spec.verify([(0, pending)])  # type: ignore[list-item]
            spec.verify([(0, pending, [1, 2])])
            with self.assertRaises(llmmini.InvalidArgError):
                spec.accept(1, sampler)  # no such item
            with self.assertRaises(llmmini.InvalidArgError):
                spec.accept(0, "greedy")  # type: ignore[arg-type]
            spec.accept(0, sampler)
            with self.assertRaises(llmmini.InvalidArgError):
                spec.accept(0, sampler)  # decided already
        # closing the context closed the speculator first
        self.assertTrue(spec.closed)
        with self.assertRaises(llmmini.InvalidArgError):
            spec.propose(0, pending)
        other.close()


if __name__ == "__main__":
    unittest.main()
