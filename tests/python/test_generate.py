"""generate() and chat(): pieces, stop strings, UTF-8 never split, early stop, and cancelling
through the abort Event and Ctrl-C (KeyboardInterrupt)."""
from __future__ import annotations

import os
import signal
import threading
import time
import unittest

import llmmini
from support import ModelTestCase

HOT = dict(temperature=3.0, top_k=0, top_p=1.0, min_p=0.0)  # near-uniform draws: many byte tokens


class SigintOnPoll(threading.Event):
    """An abort Event that sends SIGINT to this process the first time the library polls it:
    a Ctrl-C that arrives in the middle of a library call, deterministically."""

    def __init__(self) -> None:
        super().__init__()
        self.polls = 0

    def is_set(self) -> bool:
        self.polls += 1
        if self.polls == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return False


class SlowEvent(threading.Event):
    """An abort Event that makes every poll take 0.5 ms, so that a generation of hundreds of
    tokens lasts long enough for the iterating thread to stop it midway on a loaded machine."""

    def is_set(self) -> bool:
        time.sleep(0.0005)
        return super().is_set()


class GenerateTest(ModelTestCase):
    def test_pieces_and_stats(self) -> None:
        with llmmini.Context(self.model, n_ctx=256) as ctx:
            gen = ctx.generate("Once upon a time", max_tokens=40, seed=7)
            pieces = list(gen)
            self.assertTrue(all(isinstance(p, str) and p for p in pieces))
            self.assertEqual("".join(pieces), gen.text)
            self.assertEqual(gen.stats.n_prompt, 5)
            self.assertLessEqual(gen.stats.n_generated, 40)
            self.assertIn(gen.stats.stop_reason, ("max_tokens", "eos"))
            self.assertEqual(list(gen), [])  # exhausted
            again = "".join(ctx.generate("Once upon a time", max_tokens=40, seed=7))
            self.assertEqual(again, gen.text)  # same seed, same text
            if gen.stats.n_generated >= 2:  # latency percentiles of the call's token gaps
                st = gen.stats
                self.assertTrue(0 < st.inter_token_ms_p50 <= st.inter_token_ms_p99 <= st.inter_token_ms_max)
            cs = ctx.stats
            self.assertEqual(cs.n_requests, 2)
            self.assertGreater(cs.request_first_token_ms_max, 0)
            self.assertLessEqual(cs.step_ms_p50, cs.step_ms_max)

    def test_utf8_characters_are_never_split(self) -> None:
        with llmmini.Context(self.model, n_ctx=256) as ctx:
            gen = ctx.generate("Once", max_tokens=200, seed=0, **HOT)
            pieces = list(gen)
        raw = [self.model.token_to_piece(t) for t in gen.tokens]

        def incomplete(b: bytes) -> bool:
            try:
                b.decode("utf-8")
                return False
            except UnicodeDecodeError:
                return True
        self.assertTrue(any(incomplete(b) for b in raw), "no token ended inside a character")
        self.assertTrue(any(ord(ch) > 127 and ch != "\ufffd" for p in pieces for ch in p))
        # every character the bytes form arrives whole (bytes that can never form one are U+FFFD)
        text = "".join(pieces).replace("\ufffd", "")
        self.assertEqual(text, b"".join(raw).decode("utf-8", "replace").replace("\ufffd", ""))

    def test_stop_strings(self) -> None:
        with llmmini.Context(self.model, n_ctx=256) as ctx:
            full = "".join(ctx.generate("Once upon a time", max_tokens=64, temperature=0))
            self.assertIn(" Lily", full)
            gen = ctx.generate("Once upon a time", max_tokens=64, temperature=0, stop=[" Lily", "zzz"])
            text = "".join(gen)
            self.assertEqual(text, full[:full.index(" Lily")])
            self.assertEqual(gen.stats.stop_reason, "stop_string")

    def test_chat(self) -> None:
        with llmmini.Context(self.model, n_ctx=256) as ctx:
            gen = ctx.chat([{"role": "user", "content": "Tell me a story."}], template="chatml",
                           max_tokens=16, temperature=0)
            self.assertTrue("".join(gen))
            prompt = self.model.chat_format([("user", "Tell me a story.")], template="chatml")
            self.assertEqual(gen.stats.n_prompt, len(self.model.tokenize(prompt, parse_special=True)))

    def test_break_stops_the_worker(self) -> None:
        with llmmini.Context(self.model, n_ctx=1024, abort_event=SlowEvent()) as ctx:
            gen = ctx.generate("Once", max_tokens=1000, **HOT)
            for i, _ in enumerate(gen):
                if i == 3:
                    break
            gen.close()
            gen.close()
            self.assertLess(gen.stats.n_generated, 1000)
            self.assertFalse(gen._worker.is_alive())
            ctx.prefill([1, 2])  # the context is free again

    def test_abort_event(self) -> None:
        event = SlowEvent()
        with llmmini.Context(self.model, n_ctx=1024, abort_event=event) as ctx:
            ctx.prefill([1, 2, 3])
            event.set()
            with self.assertRaises(llmmini.AbortedError):
                ctx.prefill([4, 5])
            self.assertEqual(ctx.seq_length(0), 3)  # unchanged
            with self.assertRaises(llmmini.AbortedError):
                "".join(ctx.generate("Once", max_tokens=8))
            event.clear()
            # set from the iterating side while the worker generates
            gen = ctx.generate("Once", max_tokens=1000, **HOT)
            with self.assertRaises(llmmini.AbortedError):
                for i, _ in enumerate(gen):
                    if i == 2:
                        event.set()
            self.assertLess(len(gen.tokens), 1000)
            event.clear()
            self.assertTrue("".join(ctx.generate("Once", max_tokens=4)))

    def test_ctrl_c_during_a_call_raises_keyboard_interrupt(self) -> None:
        event = SigintOnPoll()
        with llmmini.Context(self.model, n_ctx=256) as ctx:
            ctx.prefill([1, 2, 3])
            ctx.abort_event = event
            with self.assertRaises(KeyboardInterrupt):
                ctx.prefill(self.model.tokenize("Once upon a time " * 10))
            self.assertEqual(ctx.seq_length(0), 3)  # the call was aborted, not completed
            self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)
            ctx.abort_event = None
            ctx.prefill([4])
            self.assertEqual(ctx.seq_length(0), 4)

    def test_ctrl_c_while_iterating_stops_the_generation(self) -> None:
        with llmmini.Context(self.model, n_ctx=2048, abort_event=SlowEvent()) as ctx:
            gen = ctx.generate("Once", max_tokens=2000, **HOT)
            with self.assertRaises(KeyboardInterrupt):
                for i, _ in enumerate(gen):
                    if i == 2:
                        os.kill(os.getpid(), signal.SIGINT)
            gen.close()
            self.assertFalse(gen._worker.is_alive())
            self.assertLess(len(gen.tokens), 2000)


if __name__ == "__main__":
    unittest.main()
