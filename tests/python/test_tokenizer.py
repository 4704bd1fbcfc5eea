"""The reference tokenizer's vectors of every vocabulary in shared/vocab, through the package."""
from __future__ import annotations

import os
import unittest

import llmmini
from support import shared

SEPARATOR = b"\n__ggml_vocab_test__\n"


def read_cases(name: str):
    """(text bytes, expected ids) of vocab/NAME.inp and NAME.out (tests/support/shared_data.c)."""
    with open(shared("vocab", name + ".inp"), "rb") as f:
        texts = f.read().split(SEPARATOR)
    with open(shared("vocab", name + ".out")) as f:
        lines = f.read().split("\n")
    return [(t, [int(x) for x in lines[i].split()]) for i, t in enumerate(texts)]


class TokenizerVectorsTest(unittest.TestCase):
    def test_every_vocab(self) -> None:
        names = sorted(f[:-4] for f in os.listdir(shared("vocab")) if f.endswith(".gguf.inp"))
        checked = 0
        for name in names:
            # vectors of a full model's vocabulary sit beside the vocab-only files
            path = shared("vocab", name)
            if not os.path.exists(path):
                path = shared("models", name)
            with self.subTest(vocab=name):
                try:
                    model = llmmini.Model(path, vocab_only=True)
                except llmmini.UnsupportedError as e:
                    # WordPiece (bert) is not supported: the error names the tokenizer
                    self.assertIn("bert", name)
                    self.assertTrue(e.message)
                    continue
                with model:
                    self.assertTrue(model.info.vocab_only)
                    for i, (text, expected) in enumerate(read_cases(name)):
                        ids = model.tokenize(text, add_special=False)
                        self.assertEqual(ids, expected, f"{name} case {i}")
                        self.assertEqual(model.detokenize(ids, errors="surrogateescape").encode(
                            "utf-8", "surrogateescape"), text, f"{name} case {i} round trip")
                checked += 1
        self.assertGreaterEqual(checked, 8)


if __name__ == "__main__":
    unittest.main()
