"""What users observe stays upstream's: the cases a review of series v4 found changed, run through the public API.

Each test holds on pristine 5.25.0 too (run this file with pristine's `src` first on `PYTHONPATH` to see it): a static
sliding window layer's keys, sizes and length as callers read them, attention weights, the logits of every attention
implementation against a forward without cache, configurations that must not log anything new, and a model whose
static cache holds linear attention layers.
"""

import unittest
from unittest import mock

import torch
from torch.nn.attention.flex_attention import flex_attention

from transformers import (
    DynamicCache,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    MistralConfig,
    MistralForCausalLM,
    StaticCache,
    T5Config,
    T5ForConditionalGeneration,
)
from transformers.integrations import flex_attention as flex_integration
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging


WINDOW = 4
SIZES = {
    "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 99, "pad_token_id": 0,
}  # fmt: skip


def _mistral(attn_implementation="sdpa", sliding_window=WINDOW):
    torch.manual_seed(0)
    model = MistralForCausalLM(MistralConfig(**SIZES, sliding_window=sliding_window))
    model.set_attn_implementation(attn_implementation)
    return model.eval()


def _ids(length, batch_size=1, seed=0):
    return torch.randint(3, 99, (batch_size, length), generator=torch.Generator().manual_seed(seed))


def _decode_one_token_at_a_time(model, cache, input_ids, prefill_length):
    """The logits of each position, from a prefill of `prefill_length` tokens and then one token per forward."""
    with torch.no_grad():
        logits = [model(input_ids[:, :prefill_length], cache=cache, use_cache=True).logits]
        for i in range(prefill_length, input_ids.shape[1]):
            logits.append(model(input_ids[:, i : i + 1], cache=cache, use_cache=True).logits)
    return torch.cat(logits, dim=1)


class StaticSlidingWindowAsUpstreamTest(unittest.TestCase):
    def test_every_attention_implementation_gives_the_logits_of_a_forward_without_cache(self):
        """
        Prefill 3 tokens, then one per forward past the window (v4 with flex: logits up to 3.0 off). Flex attention
        runs uncompiled: inductor fails to build its kernel on this machine's CPU, on both trees.
        """
        input_ids = _ids(10)
        eager_flex = mock.patch.object(
            flex_integration,
            "compile_friendly_flex_attention",
            lambda q, k, v, training=False, **kw: flex_attention(q, k, v, **kw),
        )
        for attn_implementation in ("eager", "sdpa", "flex_attention"):
            model = _mistral(attn_implementation)
            cache = StaticCache(config=model.config, max_cache_len=16)
            with torch.no_grad():
                reference = model(input_ids, use_cache=False).logits
            with eager_flex:
                logits = _decode_one_token_at_a_time(model, cache, input_ids, prefill_length=3)
            torch.testing.assert_close(logits, reference, rtol=0, atol=1e-5, msg=attn_implementation)

    def test_keys_sizes_and_length_as_callers_read_them(self):
        """After 10 tokens: the keys of positions 7 to 10 in that order, `get_mask_sizes(1, 0) == (4, 7)`, and a
        length read before a forward that does not move after it."""
        model = _mistral()
        input_ids = _ids(11)
        static, dynamic = StaticCache(config=model.config, max_cache_len=16), DynamicCache(config=model.config)
        _decode_one_token_at_a_time(model, static, input_ids[:, :10], prefill_length=6)
        _decode_one_token_at_a_time(model, dynamic, input_ids[:, :10], prefill_length=6)
        layer = static.layers[0]
        self.assertEqual(layer.keys.shape[-2], WINDOW)
        torch.testing.assert_close(layer.keys[..., 1:, :], dynamic.layers[0].keys[..., -(WINDOW - 1) :, :])
        self.assertEqual(static.get_mask_sizes(1, 0), (WINDOW, 7))
        length = static.get_seq_length()
        self.assertEqual(length, 10)
        with torch.no_grad():
            model(input_ids[:, 10:], cache=static, use_cache=True)
        self.assertEqual(length, 10)
        self.assertEqual(static.get_seq_length(), 11)
        self.assertIsInstance(static.get_seq_length(), int)

    def test_crop_and_reset(self):
        model = _mistral()
        cache = StaticCache(config=model.config, max_cache_len=16)
        _decode_one_token_at_a_time(model, cache, _ids(3), prefill_length=2)
        cache.crop(-1)
        self.assertEqual(cache.get_seq_length(), 2)
        cache.reset()
        self.assertEqual(cache.get_seq_length(), 0)
        logits = _decode_one_token_at_a_time(model, cache, _ids(9, seed=1), prefill_length=2)
        with torch.no_grad():
            torch.testing.assert_close(logits, model(_ids(9, seed=1), use_cache=False).logits, rtol=0, atol=1e-5)

    def test_attention_weights_in_the_order_of_the_positions(self):
        """Gemma 3, eager: a sliding layer's weights of a decoding step past the window, as a dynamic cache's."""
        torch.manual_seed(0)
        config = Gemma3TextConfig(**SIZES, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"])
        model = Gemma3ForCausalLM(config).eval()
        model.set_attn_implementation("eager")
        input_ids = _ids(10)
        attentions = {}
        for name, cache in (
            ("static", StaticCache(config=model.config, max_cache_len=16)),
            ("dynamic", DynamicCache(config=model.config)),
        ):
            _decode_one_token_at_a_time(model, cache, input_ids[:, :9], prefill_length=6)
            with torch.no_grad():
                out = model(input_ids[:, 9:], cache=cache, use_cache=True, output_attentions=True)
            attentions[name] = out.attentions[0]
        static = attentions["static"][..., -WINDOW:]
        torch.testing.assert_close(static, attentions["dynamic"][..., -WINDOW:], rtol=0, atol=1e-6)


class NothingNewLoggedTest(unittest.TestCase):
    def _assert_nothing_logged(self, model, **kwargs):
        logger = logging.get_logger("transformers")
        logging.set_verbosity_warning()
        with CaptureLogger(logger) as logs:
            model.generate(**kwargs)
        self.assertNotIn("compiled forward", logs.out)
        self.assertNotIn("static cache", logs.out.lower())

    def test_t5_with_a_static_cache(self):
        torch.manual_seed(0)
        config = T5Config(
            vocab_size=99, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0
        )
        model = T5ForConditionalGeneration(config).eval()
        self._assert_nothing_logged(
            model, input_ids=_ids(6), max_new_tokens=4, cache_implementation="static", do_sample=False
        )

    def test_prompt_lookup_with_a_static_cache(self):
        model = _mistral(sliding_window=None)  # static sliding window layers cannot be cropped for the verification
        input_ids = torch.tensor([[5, 6, 7, 5, 6, 7, 5, 6]])
        self._assert_nothing_logged(
            model, input_ids=input_ids, prompt_lookup_num_tokens=2, max_new_tokens=4, do_sample=False,
            cache_implementation="static",
        )  # fmt: skip


class LinearAttentionStaticCacheTest(unittest.TestCase):
    def test_lara_mini_generates_with_a_static_cache(self):
        """v4 raised `AttributeError: 'LinearAttentionLayer' object has no attribute 'get_cache_index'`."""
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.for_model(
            "lara_mini", num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=99, pad_token_id=0,
        )  # fmt: skip
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
        static = model.generate(_ids(6), max_new_tokens=4, do_sample=False, cache_implementation="static")
        self.assertEqual(static.shape, (1, 10))
