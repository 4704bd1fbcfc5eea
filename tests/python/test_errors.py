"""Errors: a bad file and bad arguments raise LlmminiError subclasses with the status name and
the library's message."""
from __future__ import annotations

import os
import signal
import tempfile
import unittest

import llmmini
from support import MODEL, ModelTestCase, shared


class ErrorsTest(ModelTestCase):
    def test_missing_file(self) -> None:
        with self.assertRaises(llmmini.IoError) as cm:
            llmmini.Model(shared("models", "no-such-model.gguf"))
        e = cm.exception
        self.assertEqual(e.status, -3)
        self.assertEqual(e.status_name, llmmini._lib.status_name(-3))
        self.assertIn("no-such-model.gguf", e.message)
        self.assertIsInstance(e, llmmini.LlmminiError)

    def test_malformed_file(self) -> None:
        with open(MODEL, "rb") as f:
            head = f.read(4096)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "cut.gguf")
            with open(path, "wb") as f:
                f.write(head)  # a valid header whose tables run past the end of the file
            with self.assertRaises(llmmini.BadFileError) as cm:
                llmmini.Model(path)
            self.assertEqual(cm.exception.status, -4)
            self.assertEqual(cm.exception.status_name, llmmini._lib.status_name(-4))
            self.assertTrue(cm.exception.message)
            self.assertIn(cm.exception.status_name, str(cm.exception))
            with open(path, "wb") as f:
                f.write(b"not a gguf file at all")
            with self.assertRaises(llmmini.BadFileError):
                llmmini.Model(path)

    def test_context_arguments(self) -> None:
        with self.assertRaises(llmmini.InvalidArgError):
            llmmini.Context(self.model, n_ctx=-1)
        with self.assertRaises(llmmini.InvalidArgError):
            llmmini.Context(self.model, kv_type="f8")
        with self.assertRaises(llmmini.InvalidArgError):
            llmmini.Context(self.model, backend="tpu")
        with self.assertRaises(llmmini.InvalidArgError):  # refused by the library: not a power of two
            llmmini.Context(self.model, kv_block_size=3)
        with self.assertRaises(llmmini.InvalidArgError):
            llmmini.Context("model.gguf")  # type: ignore[arg-type]
        with self.assertRaises(ValueError):  # InvalidArgError is a ValueError too
            llmmini.Context(self.model, n_seq_max=1 << 40)

    def test_call_arguments(self) -> None:
        with llmmini.Context(self.model, n_ctx=64, n_seq_max=2) as ctx:
            with self.assertRaises(llmmini.InvalidArgError) as cm:
                ctx.prefill([1, 100000])  # token out of range: the library's check and message
            self.assertIn("100000", cm.exception.message)
            self.assertEqual(cm.exception.status_name, "invalid argument")
            with self.assertRaises(llmmini.InvalidArgError) as cm:
                ctx.prefill([1], seq=5)
            self.assertIn("sequence", cm.exception.message)
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.prefill([1], seq=-1)
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.decode([1, 2], seqs=[0])
            with self.assertRaises(llmmini.ContextFullError):
                ctx.prefill([1] * 65)
            self.assertEqual(ctx.seq_length(0), 0)  # nothing written
            ctx.prefill([1, 2, 3])
            with self.assertRaises(llmmini.NotFoundError):
                ctx.logits(5)
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.truncate(0, 10)
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.generate("x", max_tokens=-1)
            with self.assertRaises(llmmini.InvalidArgError):
                ctx.generate("x", temperature="hot")  # type: ignore[arg-type]
            with self.assertRaises(llmmini.BadFileError) as cm:
                ctx.load(b"not a saved state")
            self.assertTrue(cm.exception.message)
            with self.assertRaises(llmmini.IoError):
                ctx.load(shared("models", "no-such-state.bin"))
        with self.assertRaises(llmmini.InvalidArgError):
            self.model.detokenize(["a"])  # type: ignore[list-item]
        with self.assertRaises(llmmini.InvalidArgError):
            self.model.token_to_piece(100000)
        with self.assertRaises(llmmini.InvalidArgError):
            self.model.chat_format([{"role": "robot", "content": "hi"}], template="chatml")
        with self.assertRaises(llmmini.UnsupportedError) as cm:
            self.model.chat_format([{"role": "user", "content": "hi"}])  # stories260K has no template
        self.assertIn("chatml", cm.exception.message)
        with self.assertRaises(llmmini.UnsupportedError):
            self.model.chat_format([("user", "hi")], template="no-such-format")

    def test_vocab_only_and_closed(self) -> None:
        with llmmini.Model(MODEL, vocab_only=True) as vocab:
            with self.assertRaises(llmmini.VocabOnlyError):
                llmmini.Context(vocab)
        model = llmmini.Model(MODEL)
        model.close()
        model.close()  # idempotent
        self.assertTrue(model.closed)
        with self.assertRaises(llmmini.InvalidArgError):
            model.tokenize("x")
        with self.assertRaises(llmmini.InvalidArgError):
            llmmini.Context(model)
        ctx = llmmini.Context(self.model, n_ctx=16)
        ctx.close()
        ctx.close()
        with self.assertRaises(llmmini.InvalidArgError):
            ctx.prefill([1])

    def test_progress_cancels_load(self) -> None:
        seen = []
        with self.assertRaises(llmmini.AbortedError):
            llmmini.Model(MODEL, progress=lambda f: seen.append(f) or True)
        self.assertTrue(seen)

        def boom(fraction: float) -> bool:
            raise RuntimeError("from the callback")
        with self.assertRaisesRegex(RuntimeError, "from the callback"):
            llmmini.Model(MODEL, progress=boom)

        def ctrl_c(fraction: float) -> bool:
            if fraction < 1:
                os.kill(os.getpid(), signal.SIGINT)
            return False
        with self.assertRaises(KeyboardInterrupt):
            llmmini.Model(MODEL, progress=ctrl_c)
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)


if __name__ == "__main__":
    unittest.main()
