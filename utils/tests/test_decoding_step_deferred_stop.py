"""The compiled decoding step (patch 24) with `DeferredStopCheck`, which reads the stop flag one step late on devices
with events (upstream enables it on MPS): forced on CPU, the step gives the regular loop's tokens and scores, and the
check's extra step is undone, as in the regular loop."""

import copy
import unittest
from unittest import mock

import torch
from parameterized import parameterized
from test_stopping_guards import forced_deferred_stop_check

from transformers import CompileConfig, GPT2Config, GPT2LMHeadModel, StaticCache
from transformers.generation.decoding_step import DecodingStep


NEW_TOKENS = 8


def _model():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=99, pad_token_id=0)
    return GPT2LMHeadModel(config).eval()


def _generate(model, step, **kwargs):
    # two equal rows, so that an eos token stops the whole batch before `max_new_tokens`
    input_ids = torch.randint(3, 99, (1, 5), generator=torch.Generator().manual_seed(5)).repeat(2, 1)
    attention_mask = torch.ones_like(input_ids)
    generation_config = copy.deepcopy(model.generation_config)
    generation_config.compile_decoding_step = step
    compile_config = CompileConfig(backend="eager", mode=None, fullgraph=True)
    compile_config._compile_all_devices = True
    if "cache" not in kwargs:
        kwargs["cache_implementation"] = "static"
    kwargs = {"max_new_tokens": NEW_TOKENS, "eos_token_id": None, **kwargs}
    return model.generate(
        input_ids, attention_mask=attention_mask, generation_config=generation_config, compile_config=compile_config,
        output_scores=True, return_dict_in_generate=True, **kwargs,
    )  # fmt: skip


class DeferredStopCheckDecodingStepTest(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()

    @parameterized.expand([("no_eos", False, False), ("eos", True, False), ("eos_passed_cache", True, True)])
    def test_step_with_the_deferred_check_gives_the_regular_loop_outputs(self, _, with_eos, passed_cache):
        model = _model()
        eos = _generate(model, False).sequences[0, 7].item() if with_eos else None  # the third new token

        def kwargs():
            extra = {"eos_token_id": eos}
            if passed_cache:
                extra["cache"] = StaticCache(config=model.config, max_cache_len=32)
            return extra

        expected = _generate(model, False, **kwargs())
        run, ran = DecodingStep.run, []
        with (
            forced_deferred_stop_check() as finish,
            mock.patch.object(
                DecodingStep, "run", autospec=True, side_effect=lambda *a: ran.append(run(*a)) or ran[-1]
            ),
        ):
            deferred_regular = _generate(model, False, **kwargs())
            deferred_step = _generate(model, True, **kwargs())
        self.assertEqual(finish.call_count, 2)
        # the step ran every decoding step of the second call (the regular loop runs where it returns None)
        self.assertEqual(len(ran), 1)
        self.assertIsNotNone(ran[0])
        if with_eos:
            self.assertLess(expected.sequences.shape[1], 5 + NEW_TOKENS)  # the eos token stopped the batch
        for output in (deferred_regular, deferred_step):
            self.assertTrue(torch.equal(output.sequences, expected.sequences))
            torch.testing.assert_close(torch.stack(output.scores), torch.stack(expected.scores), rtol=0, atol=0)
        if passed_cache:
            # the check's extra step leaves no trace in the cache either: its length and keys are the regular loop's
            length = expected.cache.get_seq_length()
            self.assertEqual(deferred_step.cache.get_seq_length(), length)
            for layer, expected_layer in zip(deferred_step.cache.layers, expected.cache.layers):
                torch.testing.assert_close(
                    layer.keys[:, :, :length], expected_layer.keys[:, :, :length], rtol=0, atol=0
                )
