"""4D attention masks (boolean and additive, exact or statically shaped) in GPT2 give the same result as 2D masks."""

import random
import re
import unittest
from functools import cache

import pytest
from parameterized import parameterized

from transformers import GPT2Config, is_torch_available
from transformers.testing_utils import require_torch, torch_device


if is_torch_available():
    import torch

    from transformers import (
        GenerationConfig,
        GPT2DoubleHeadsModel,
        GPT2ForQuestionAnswering,
        GPT2ForSequenceClassification,
        GPT2ForTokenClassification,
        GPT2LMHeadModel,
        GPT2Model,
    )
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache, StaticCache
    from transformers.generation.configuration_utils import ContinuousBatchingConfig


VOCAB_SIZE = 99
PAD_TOKEN_ID = 0
SEQ_LENGTH = 8  # tokens per sequence in the matrix: a prefill of PREFILL_LENGTH, then the rest in one chunk
PREFILL_LENGTH = 5
ENCODER_LENGTH = 5
MAX_CACHE_LENGTH = 14  # StaticCache length: the keys are this long at every step
STATIC_MASK_LENGTH = 16  # the statically shaped masks: longer than the keys in every case
ATOL = 1e-5
# 4D masks of the exact length of the keys, and masks longer than the keys (cut to them)
LENGTHS = ("exact", "static")
MAX_EXTRA_LENGTH = 4

# (attn_implementation, reorder_and_upcast_attn): `reorder_and_upcast_attn` only changes the eager path
ATTENTION_PATHS = [("eager", False), ("eager", True), ("sdpa", False), ("sdpa", True)]


def _config(attn_implementation="eager", reorder_and_upcast_attn=False, add_cross_attention=False, **kwargs):
    config = GPT2Config(
        vocab_size=VOCAB_SIZE,
        n_positions=64,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=VOCAB_SIZE - 1,
        eos_token_id=VOCAB_SIZE - 1,
        pad_token_id=PAD_TOKEN_ID,
        reorder_and_upcast_attn=reorder_and_upcast_attn,
        add_cross_attention=add_cross_attention,
        **kwargs,
    )
    config._attn_implementation = attn_implementation
    return config


@cache
def _model(model_class=None, attn_implementation="eager", reorder_and_upcast_attn=False, add_cross_attention=False):
    """One float32 model per configuration: they are only used in eval mode and never modified."""
    torch.manual_seed(0)
    config = _config(attn_implementation, reorder_and_upcast_attn, add_cross_attention)
    return (model_class or GPT2LMHeadModel)(config).to(torch_device).eval()


def _as_kind(mask, kind, dtype=None):
    """A boolean mask (True = attend) as is, or as an additive mask (0 = attend, `finfo(dtype).min` = masked)."""
    if kind == "bool":
        return mask
    dtype = dtype or torch.float32
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def _causal_4d(mask_2d, past_length, key_length):
    """
    The boolean 4D mask `(batch_size, 1, query_length, key_length)` equivalent to the 2D padding mask `mask_2d`
    `(batch_size, past_length + query_length)` with the causal structure, for the queries after `past_length`. Keys
    beyond `mask_2d` (the rest of a static cache, or a statically shaped mask) are masked.
    """
    batch_size, seen_length = mask_2d.shape
    query_positions = torch.arange(past_length, seen_length, device=mask_2d.device)[:, None]
    key_positions = torch.arange(key_length, device=mask_2d.device)[None, :]
    padding = torch.zeros(batch_size, key_length, dtype=torch.bool, device=mask_2d.device)
    padding[:, :seen_length] = mask_2d.bool()
    return (key_positions <= query_positions)[None, None] & padding[:, None, None, :]


def _bidirectional_4d(mask_2d, query_length, key_length):
    """The boolean 4D cross-attention mask `(batch_size, 1, query_length, key_length)` of the 2D encoder mask."""
    batch_size, encoder_length = mask_2d.shape
    padding = torch.zeros(batch_size, key_length, dtype=torch.bool, device=mask_2d.device)
    padding[:, :encoder_length] = mask_2d.bool()
    return padding[:, None, None, :].expand(batch_size, 1, query_length, key_length)


def _inputs(batch_size=3, seq_length=SEQ_LENGTH, seed=1):
    """Token ids and a 2D mask with a left padded, a right padded and an unpadded sequence."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, VOCAB_SIZE - 1, (batch_size, seq_length), generator=generator)
    mask_2d = torch.ones(batch_size, seq_length, dtype=torch.long)
    mask_2d[0, :3] = 0
    mask_2d[1, -2:] = 0
    input_ids = input_ids.masked_fill(mask_2d == 0, PAD_TOKEN_ID)
    return input_ids.to(torch_device), mask_2d.to(torch_device)


def _assert_close_on_attending_rows(test_case, actual, expected, mask_4d, atol=ATOL):
    """Compare the outputs of the query rows that attend to at least one key (pure left padding rows are excluded)."""
    attending = mask_4d.any(dim=-1)[:, 0]  # (batch_size, query_length)
    test_case.assertTrue(attending.any())
    torch.testing.assert_close(actual[attending], expected[attending], rtol=0, atol=atol)


@require_torch
class GPT2FourDimensionalMaskTest(unittest.TestCase):
    @parameterized.expand(
        [
            (
                f"{attn}{'_upcast' if upcast else ''}_{'cross' if cross else 'self'}_{kind}_{length}_{cache}",
                attn,
                upcast,
                cross,
                kind,
                length,
                cache,
            )
            for attn, upcast in ATTENTION_PATHS
            for cross in (False, True)
            for kind in ("bool", "additive")
            for length in LENGTHS
            for cache in ("none", "dynamic", "static")
            # without a cache, the key length is not known to the mask utilities: a longer mask is not cut
            if not (length == "static" and cache == "none")
        ]
    )
    def test_4d_mask_matches_2d_mask(
        self, _, attn_implementation, reorder_and_upcast_attn, cross, kind, length, cache
    ):
        model = _model(GPT2LMHeadModel, attn_implementation, reorder_and_upcast_attn, cross)
        input_ids, mask_2d = _inputs()
        batch_size = input_ids.shape[0]

        cross_inputs_2d, cross_inputs_4d = {}, {}
        if cross:
            torch.manual_seed(2)
            encoder_hidden_states = torch.randn(batch_size, ENCODER_LENGTH, model.config.n_embd, device=torch_device)
            encoder_mask_2d = torch.ones(batch_size, ENCODER_LENGTH, dtype=torch.long, device=torch_device)
            encoder_mask_2d[0, -2:] = 0
            encoder_mask_2d[2, :1] = 0
            encoder_key_length = ENCODER_LENGTH if length == "exact" else ENCODER_LENGTH + 3
            cross_inputs_2d = {
                "encoder_hidden_states": encoder_hidden_states,
                "encoder_attention_mask": encoder_mask_2d,
            }
            cross_inputs_4d = {"encoder_hidden_states": encoder_hidden_states}

        def make_cache():
            if cache == "none":
                return None
            if cache == "dynamic":
                self_cache = DynamicCache(config=model.config)
            else:
                self_cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE_LENGTH)
            return EncoderDecoderCache(self_cache, DynamicCache(config=model.config)) if cross else self_cache

        # Without a cache: one forward over all the tokens. With a cache: a prefill, then the rest in one chunk
        chunks = [(0, SEQ_LENGTH)] if cache == "none" else [(0, PREFILL_LENGTH), (PREFILL_LENGTH, SEQ_LENGTH)]
        cache_2d, cache_4d = make_cache(), make_cache()
        use_cache = cache != "none"
        with torch.no_grad():
            for start, end in chunks:
                key_length = MAX_CACHE_LENGTH if cache == "static" else end
                if length == "static":
                    key_length = STATIC_MASK_LENGTH
                mask_4d = _causal_4d(mask_2d[:, :end], start, key_length)
                if cross:
                    encoder_mask_4d = _bidirectional_4d(encoder_mask_2d, end - start, encoder_key_length)
                    cross_inputs_4d["encoder_attention_mask"] = _as_kind(encoder_mask_4d, kind)

                expected = model(
                    input_ids[:, start:end],
                    attention_mask=mask_2d[:, :end],
                    cache=cache_2d,
                    use_cache=use_cache,
                    **cross_inputs_2d,
                ).logits
                actual = model(
                    input_ids[:, start:end],
                    attention_mask=_as_kind(mask_4d, kind),
                    cache=cache_4d,
                    use_cache=use_cache,
                    **cross_inputs_4d,
                ).logits
                _assert_close_on_attending_rows(self, actual, expected, mask_4d)

    @parameterized.expand([(f"seed_{seed}", seed) for seed in range(24)])
    def test_4d_mask_matches_2d_mask_random_cases(self, _, seed):
        """Seeded random cases: batch size, length, left or right padding per sequence, mask kind, path, extra length."""
        rng = random.Random(seed)
        batch_size, seq_length = rng.randint(1, 3), rng.randint(2, 10)
        kind, path = rng.choice(["bool", "additive"]), rng.choice(ATTENTION_PATHS[:3])
        extra_length = rng.randint(0, MAX_EXTRA_LENGTH)
        model = _model(GPT2LMHeadModel, *path)
        mask_2d = torch.ones(batch_size, seq_length, dtype=torch.long)
        for row in range(batch_size):
            # At least one real token per sequence, the padding on the left or on the right
            num_padding = rng.randint(0, seq_length - 1)
            if rng.random() < 0.5:
                mask_2d[row, :num_padding] = 0
            else:
                mask_2d[row, seq_length - num_padding :] = 0
        input_ids = torch.randint(
            1, VOCAB_SIZE - 1, (batch_size, seq_length), generator=torch.Generator().manual_seed(seed)
        )
        input_ids, mask_2d = (
            input_ids.masked_fill(mask_2d == 0, PAD_TOKEN_ID).to(torch_device),
            mask_2d.to(torch_device),
        )
        # With a cache, so that the key length is known and a longer mask is cut to it
        mask_4d = _causal_4d(mask_2d, 0, seq_length + extra_length)
        with torch.no_grad():
            expected = model(input_ids, attention_mask=mask_2d).logits
            actual = model(
                input_ids, attention_mask=_as_kind(mask_4d, kind), cache=DynamicCache(config=model.config)
            ).logits
        _assert_close_on_attending_rows(self, actual, expected, mask_4d)

    @parameterized.expand(
        [
            (f"{attn}{'_upcast' if upcast else ''}_{kind}", attn, upcast, kind)
            for attn, upcast in ATTENTION_PATHS[:3]
            for kind in ("bool", "additive")
        ]
    )
    def test_decode_with_static_length_mask_and_dynamic_cache(
        self, _, attn_implementation, reorder_and_upcast_attn, kind
    ):
        """Greedy decoding with a 4D mask of the maximum length on a DynamicCache, that holds fewer keys at every step."""
        model = _model(GPT2LMHeadModel, attn_implementation, reorder_and_upcast_attn)
        input_ids, mask_2d = _inputs(seq_length=PREFILL_LENGTH)
        max_length, batch_size = STATIC_MASK_LENGTH, input_ids.shape[0]
        cache_2d, cache_4d = DynamicCache(config=model.config), DynamicCache(config=model.config)

        with torch.no_grad():
            past_length = 0
            while past_length < max_length - 4:
                mask_4d = _causal_4d(mask_2d, past_length, max_length)
                expected = model(input_ids, attention_mask=mask_2d, cache=cache_2d, use_cache=True).logits
                actual = model(
                    input_ids, attention_mask=_as_kind(mask_4d, kind), cache=cache_4d, use_cache=True
                ).logits
                _assert_close_on_attending_rows(self, actual, expected, mask_4d)
                self.assertEqual(cache_4d.get_seq_length(), mask_2d.shape[1])

                past_length = mask_2d.shape[1]
                input_ids = expected[:, -1:].argmax(-1)
                mask_2d = torch.cat([mask_2d, mask_2d.new_ones(batch_size, 1)], dim=-1)

    @parameterized.expand([("eager",), ("sdpa",)])
    @pytest.mark.torch_compile_test
    def test_compiled_decode_with_static_length_mask_and_static_cache(self, attn_implementation):
        """8 decode steps of a `fullgraph` compiled forward: no graph break, one graph, the eager logits."""
        from torch._dynamo.testing import CompileCounter
        from torch._dynamo.utils import counters

        model = _model(GPT2LMHeadModel, attn_implementation)
        input_ids, mask_2d = _inputs(seq_length=PREFILL_LENGTH)
        # The mask has one shape at every step, longer than the keys of the static cache
        batch_size, mask_length = input_ids.shape[0], STATIC_MASK_LENGTH
        caches = [StaticCache(config=model.config, max_cache_len=MAX_CACHE_LENGTH) for _ in range(3)]
        compiled_cache, eager_cache, cache_2d = caches

        torch._dynamo.reset()
        counters.clear()
        backend = CompileCounter()
        compiled_forward = torch.compile(model.forward, backend=backend, fullgraph=True)
        try:
            with torch.no_grad():
                # The prefill runs eagerly, like in `generate`
                mask_4d = _causal_4d(mask_2d, 0, mask_length)
                for step_cache in (compiled_cache, eager_cache):
                    logits = model(input_ids, attention_mask=mask_4d, cache=step_cache, use_cache=True).logits
                expected = model(input_ids, attention_mask=mask_2d, cache=cache_2d, use_cache=True).logits
                _assert_close_on_attending_rows(self, logits, expected, mask_4d)

                for _ in range(8):
                    input_ids = expected[:, -1:].argmax(-1)
                    past_length = mask_2d.shape[1]
                    mask_2d = torch.cat([mask_2d, mask_2d.new_ones(batch_size, 1)], dim=-1)
                    mask_4d = _causal_4d(mask_2d, past_length, mask_length)

                    compiled = compiled_forward(
                        input_ids, attention_mask=mask_4d, cache=compiled_cache, use_cache=True
                    ).logits
                    eager = model(input_ids, attention_mask=mask_4d, cache=eager_cache, use_cache=True).logits
                    expected = model(input_ids, attention_mask=mask_2d, cache=cache_2d, use_cache=True).logits
                    torch.testing.assert_close(compiled, eager, rtol=0, atol=ATOL)
                    _assert_close_on_attending_rows(self, compiled, expected, mask_4d)

            self.assertEqual(sum(counters["graph_break"].values()), 0, dict(counters["graph_break"]))
            self.assertEqual(backend.frame_count, 1)
        finally:
            torch._dynamo.reset()

    @parameterized.expand(
        [
            ("model", GPT2Model),
            ("lm_head", GPT2LMHeadModel),
            ("double_heads", GPT2DoubleHeadsModel),
            ("sequence_classification", GPT2ForSequenceClassification),
            ("token_classification", GPT2ForTokenClassification),
            ("question_answering", GPT2ForQuestionAnswering),
        ]
    )
    def test_all_heads_accept_4d_masks(self, _, model_class):
        model = _model(model_class, "eager")
        input_ids, mask_2d = _inputs()
        mask_4d = _causal_4d(mask_2d, 0, SEQ_LENGTH)
        attending = mask_4d.any(dim=-1)[:, 0]
        inputs_2d, inputs_4d = {"attention_mask": mask_2d}, {"attention_mask": mask_4d}
        if model_class is GPT2DoubleHeadsModel:
            # (batch_size, num_choices, seq_length) inputs, flattened by the model: the 4D mask is for the flat batch
            num_choices = 2
            input_ids = input_ids[:, None].repeat(1, num_choices, 1)
            mc_token_ids = torch.full(input_ids.shape[:2], SEQ_LENGTH - 3, device=torch_device)
            inputs_2d = {"attention_mask": mask_2d[:, None].repeat(1, num_choices, 1), "mc_token_ids": mc_token_ids}
            inputs_4d = {"attention_mask": mask_4d.repeat_interleave(num_choices, 0), "mc_token_ids": mc_token_ids}
            attending = attending[:, None].expand(input_ids.shape)

        with torch.no_grad():
            expected, actual = model(input_ids, **inputs_2d), model(input_ids, **inputs_4d)
        compared = 0
        for name, expected_value in expected.items():
            if name == "cache":
                continue
            actual_value = actual[name]
            if actual_value.shape[: attending.ndim] == attending.shape:  # per token outputs
                actual_value, expected_value = actual_value[attending], expected_value[attending]
            torch.testing.assert_close(actual_value, expected_value, rtol=0, atol=ATOL, msg=name)
            compared += 1
        self.assertGreater(compared, 0)

    def test_masks_that_cannot_broadcast_raise(self):
        model = _model(GPT2LMHeadModel, "eager")
        input_ids, mask_2d = _inputs()
        batch_size, seq_length = input_ids.shape
        mask_4d = _causal_4d(mask_2d, 0, seq_length)
        expected = f"Expected a 4D attention mask of shape ({batch_size}, num_heads, {seq_length}, {seq_length})"
        for name, mask in {"shorter_than_keys": mask_4d[..., :-1], "wrong_query_length": mask_4d[:, :, :-1]}.items():
            with self.subTest(name), torch.no_grad():
                with self.assertRaisesRegex(
                    ValueError, re.escape(expected) + r".*but got " + re.escape(str(tuple(mask.shape)))
                ):
                    # with a cache, the mask functions know the number of keys
                    model(input_ids, attention_mask=mask, cache=DynamicCache(config=model.config))

        # In decoding, the keys include the cache: a mask of the new tokens only is too short
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            model(input_ids, attention_mask=mask_2d, cache=cache, use_cache=True)
            mask = torch.ones(batch_size, 1, 1, 2, dtype=torch.bool, device=torch_device)
            with self.assertRaisesRegex(ValueError, re.escape(f"(3, num_heads, 1, {seq_length + 1}) for 1 queries")):
                model(input_ids[:, -1:], attention_mask=mask, cache=cache, use_cache=True)

        # Cross-attention: the encoder mask has to cover the encoder states
        cross_model = _model(GPT2LMHeadModel, "eager", False, True)
        encoder_hidden_states = torch.randn(batch_size, ENCODER_LENGTH, cross_model.config.n_embd, device=torch_device)
        encoder_mask = torch.ones(batch_size, 1, seq_length, ENCODER_LENGTH - 1, dtype=torch.bool, device=torch_device)
        with torch.no_grad(), self.assertRaisesRegex(ValueError, re.escape(f"but got {tuple(encoder_mask.shape)}")):
            cross_model(input_ids, encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_mask)

    @parameterized.expand([("eager", "bool"), ("eager", "additive"), ("sdpa", "bool"), ("sdpa", "additive")])
    def test_broadcastable_encoder_attention_mask(self, attn_implementation, kind):
        """A `(batch_size, 1, 1, encoder_length)` cross-attention mask broadcasts over the queries."""
        model = _model(GPT2LMHeadModel, attn_implementation, False, True)
        input_ids, mask_2d = _inputs()
        torch.manual_seed(2)
        encoder_hidden_states = torch.randn(3, ENCODER_LENGTH, model.config.n_embd, device=torch_device)
        encoder_mask_2d = torch.ones(3, ENCODER_LENGTH, dtype=torch.long, device=torch_device)
        encoder_mask_2d[0, -2:] = 0
        encoder_mask_4d = _as_kind(encoder_mask_2d.bool()[:, None, None, :], kind)
        with torch.no_grad():
            expected = model(
                input_ids, attention_mask=mask_2d, encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_mask_2d,
            ).logits  # fmt: skip
            actual = model(
                input_ids, attention_mask=mask_2d, encoder_hidden_states=encoder_hidden_states,
                encoder_attention_mask=encoder_mask_4d,
            ).logits  # fmt: skip
        attending = mask_2d.bool()
        torch.testing.assert_close(actual[attending], expected[attending], rtol=0, atol=ATOL)

    def test_continuous_batching_masks_are_not_cut(self):
        """Continuous batching, which builds 4D masks of the keys it reads from its paged cache, gives the tokens of `generate`."""
        model = _model(GPT2LMHeadModel, "sdpa")
        generation_config = GenerationConfig(
            max_new_tokens=5, do_sample=False, eos_token_id=VOCAB_SIZE - 1, pad_token_id=PAD_TOKEN_ID
        )
        prompts = [[5, 6, 7, 8], [9, 10, 11]]
        outputs = model.generate_batch(
            inputs=prompts,
            generation_config=generation_config,
            continuous_batching_config=ContinuousBatchingConfig(num_blocks=8, max_batch_tokens=32, page_size=16),
            warmup=False,
        )
        self.assertEqual(len(outputs), len(prompts))
        for prompt, request_id in zip(prompts, sorted(outputs)):
            output = outputs[request_id]
            with torch.no_grad():
                expected = model.generate(
                    torch.tensor([prompt], device=torch_device), generation_config=generation_config
                )
            self.assertEqual(output.generated_tokens, expected[0, len(prompt) :].tolist())
