"""Four contexts on one model in four Python threads give what each gives alone."""
from __future__ import annotations

import threading
import unittest

import llmmini
from support import MODEL

PROMPTS = ["Once upon a time", "The little dog", "Lily had a ball", "One day, Tom"]


class ThreadsTest(unittest.TestCase):
    def test_four_contexts_on_one_model(self) -> None:
        with llmmini.Model(MODEL) as model:
            def run(prompt: str, seed: int) -> list:
                with llmmini.Context(model, n_ctx=256, threads=1) as ctx:
                    out = []
                    for _ in range(3):
                        gen = ctx.generate(prompt, max_tokens=48, seed=seed, temperature=0.8)
                        "".join(gen)
                        out.append(gen.tokens)
                        ctx.prefill(model.tokenize(prompt))  # the low-level calls too
                        out.append([int(max(range(len(row)), key=row.__getitem__)) for row in [ctx.logits()]])
                    return out

            alone = [run(p, i) for i, p in enumerate(PROMPTS)]
            results: list = [None] * len(PROMPTS)
            errors: list = []
            start = threading.Barrier(len(PROMPTS))

            def worker(i: int) -> None:
                try:
                    start.wait()
                    results[i] = run(PROMPTS[i], i)
                except BaseException as e:  # noqa: B902 - reported by the main thread
                    errors.append(e)

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(PROMPTS))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            self.assertEqual(results, alone)


if __name__ == "__main__":
    unittest.main()
