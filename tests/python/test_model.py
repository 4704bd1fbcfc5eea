"""Model: info, metadata, special tokens, tokenize/detokenize flags, chat formatting."""
from __future__ import annotations

import unittest

import llmmini
from support import MODEL


class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.model = llmmini.Model(MODEL, use_mmap=False)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.model.close()

    def test_info_and_metadata(self) -> None:
        info = self.model.info
        self.assertEqual(info.architecture, "llama")
        self.assertEqual(info.tokenizer, "spm")
        self.assertEqual((info.n_vocab, info.n_layer, info.n_embd), (512, 5, 64))
        self.assertFalse(info.vocab_only)
        meta = self.model.metadata
        self.assertEqual(meta["general.architecture"], "llama")
        self.assertEqual(meta["llama.block_count"], 5)
        self.assertIsInstance(meta["llama.attention.layer_norm_rms_epsilon"], float)
        self.assertNotIn("tokenizer.ggml.tokens", meta)  # arrays are not exposed
        self.assertIn("llama.context_length", dict(meta))
        with self.assertRaises(KeyError):
            meta["no.such.key"]

    def test_special_tokens(self) -> None:
        self.assertEqual(self.model.special_token("bos"), 1)
        self.assertEqual(self.model.special_token("eos"), 2)
        with self.assertRaises(llmmini.InvalidArgError):
            self.model.special_token("start")

    def test_tokenize_flags(self) -> None:
        ids = self.model.tokenize("Once upon a time")
        self.assertEqual(ids, [1, 403, 407, 261, 378])
        self.assertEqual(self.model.tokenize("Once upon a time", add_special=False), ids[1:])
        self.assertEqual(self.model.tokenize(b"Once upon a time"), ids)
        self.assertEqual(self.model.tokenize("<s>x", add_special=False, parse_special=True)[0], 1)
        self.assertNotEqual(self.model.tokenize("<s>x", add_special=False)[0], 1)
        self.assertEqual(self.model.detokenize(ids[1:]), "Once upon a time")
        self.assertEqual(self.model.detokenize(ids[1:], strip_space=False), " Once upon a time")
        self.assertEqual(self.model.detokenize(ids, render_special=True), "<s> Once upon a time")
        self.assertEqual(self.model.token_to_piece(403), b" Once")
        long_text = "a b c " * 2000  # more tokens than the first buffer guess holds
        self.assertEqual(self.model.detokenize(self.model.tokenize(long_text, add_special=False)), long_text)

    def test_chat_format(self) -> None:
        names = llmmini.chat_template_names()
        self.assertIn("chatml", names)
        self.assertIsNone(self.model.chat_template)
        text = self.model.chat_format([{"role": "system", "content": "Be brief."}, ("user", "Hi")],
                                      template="chatml")
        self.assertEqual(text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                               "<|im_start|>assistant\n")
        self.assertFalse(self.model.chat_format([("user", "Hi")], template="chatml",
                                                add_generation_prompt=False).endswith("assistant\n"))


if __name__ == "__main__":
    unittest.main()
