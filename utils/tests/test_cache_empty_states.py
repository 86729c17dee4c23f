"""
The cache layers' empty states (patch "Cache: keep empty states of their own rank in every layer, not 1-D placeholders"),
over more layers, operations and models than the patch's own tests: batch operations on layers without tokens, the
model-file layers early-initialized then given states, seeded random operation sequences against plain tensors, and
`generate` with a cache against `generate` without one, on tiny models of each cache layout.
"""

import random
import unittest

from parameterized import parameterized

from transformers import is_torch_available
from transformers.testing_utils import require_torch
from transformers.utils import is_hqq_available, is_optimum_quanto_available


if is_torch_available():
    import torch

    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        DeepseekV3Config,
        DeepseekV3ForCausalLM,
        DeepseekV4Config,
        DeepseekV4ForCausalLM,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        UnlimitedOcrTextConfig,
        UnlimitedOcrTextModel,
    )
    from transformers.cache_utils import (
        Cache,
        DynamicCache,
        DynamicIndexedLayer,
        DynamicLayer,
        DynamicSlidingWindowLayer,
        LinearAttentionAndFullAttentionLayer,
        QuantizedLayer,
    )
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4CSACache, DeepseekV4HCACache
    from transformers.models.unlimited_ocr.modeling_unlimited_ocr import (
        UnlimitedOcrDynamicReferenceSlidingWindowLayer,
    )

    class LosslessQuantizedLayer(QuantizedLayer):
        """A pure-torch `QuantizedLayer` backend whose "quantization" is a copy: it exercises the residual window
        and its flushes without any quantization error, so results can be compared exactly."""

        def _quantize(self, tensor, axis):
            return tensor.clone()

        def _dequantize(self, q_tensor):
            return q_tensor


BATCH, HEADS, KEY_DIM, VALUE_DIM = 2, 3, 16, 8


def _states(batch=BATCH, length=1, head_dim=KEY_DIM, dtype=None):
    return torch.randn(batch, HEADS, length, head_dim, dtype=dtype or torch.float32)


def _make_layer(name):
    return {
        "dynamic": DynamicLayer,
        "sliding_window": lambda: DynamicSlidingWindowLayer(sliding_window=4),
        "linear_and_full_attention": LinearAttentionAndFullAttentionLayer,
        "quantized": lambda: LosslessQuantizedLayer(residual_length=2),
    }[name]()


LAYERS = [("dynamic",), ("sliding_window",), ("linear_and_full_attention",), ("quantized",)]


def _make_model_file_layer(name):
    """The layers of model files that override `update`."""
    if name == "unlimited_ocr_reference_sliding_window":
        return UnlimitedOcrDynamicReferenceSlidingWindowLayer(sliding_window=4)
    layer_class = DeepseekV4HCACache if name == "deepseek_v4_hca" else DeepseekV4CSACache
    return layer_class(DeepseekV4Config(sliding_window=4))


MODEL_FILE_LAYERS = ["deepseek_v4_hca", "deepseek_v4_csa", "unlimited_ocr_reference_sliding_window"]
EARLY_INITIALIZED_CASES = [
    (name, case)
    for name in MODEL_FILE_LAYERS
    for case in ("another_batch_size", "batch_repeat_interleave", "batch_select_indices", "reorder_cache", "bfloat16")
] + [("unlimited_ocr_reference_sliding_window", "values_of_another_head_dim")]


@require_torch
class EmptyCacheLayerMatrixTest(unittest.TestCase):
    """Batch operations on layers without tokens, and the model-file layers, early-initialized then given states."""

    def setUp(self):
        torch.manual_seed(0)

    def _initialized_empty_layer(self, how):
        """A `DynamicLayer` that holds states of batch size `BATCH`, but no token."""
        if how == "early_initialization":
            cache = DynamicCache(config=LlamaConfig(num_hidden_layers=1, hidden_size=48, num_attention_heads=HEADS))
            cache.early_initialization(BATCH, HEADS, KEY_DIM, torch.float32, "cpu")
            return cache.layers[0]
        layer = DynamicLayer()
        if how == "crop_to_zero":
            layer.update(_states(length=3), _states(length=3))
            layer.crop(-3)
        elif how == "update_of_length_zero":
            layer.update(_states(length=0), _states(length=0))
        return layer

    @parameterized.expand(
        [
            (how, op)
            for how in ("early_initialization", "crop_to_zero", "update_of_length_zero")
            for op in ("batch_repeat_interleave", "batch_select_indices", "reorder_cache")
        ]
    )
    def test_initialized_empty_layer_after_batch_operations(self, how, op):
        """Batch operations leave a layer without tokens as it is; it takes the batch size of the next states."""
        layer = self._initialized_empty_layer(how)
        self.assertTrue(layer.is_initialized)
        self.assertEqual(layer.get_seq_length(), 0)
        if op == "batch_repeat_interleave":
            layer.batch_repeat_interleave(3)
            new_batch = 3 * BATCH
        elif op == "batch_select_indices":
            layer.batch_select_indices(torch.tensor([1]))
            new_batch = 1
        else:
            # indices beyond the layer's batch size, which its empty states do not have to follow
            layer.reorder_cache(torch.tensor([2, 1, 0]))
            new_batch = 3
        keys, values = _states(batch=new_batch, length=2), _states(batch=new_batch, length=2)
        torch.testing.assert_close(layer.update(keys, values), (keys, values))
        self.assertEqual(layer.keys.shape, (new_batch, HEADS, 2, KEY_DIM))

    @parameterized.expand(EARLY_INITIALIZED_CASES)
    def test_early_initialized_model_file_layer_takes_the_shape_of_new_states(self, name, case):
        """
        A layer early-initialized for batch size 2 (as `Cache.early_initialization` does) gives what a layer initialized
        by the new states gives, in the dtype of the early initialization (into which `torch.cat` promotes them).
        """
        layer, reference = _make_model_file_layer(name), _make_model_file_layer(name)
        fake = torch.zeros((BATCH, HEADS, 0, KEY_DIM))
        layer.lazy_initialization(fake, fake)
        new_batch, value_dim, dtype = 3 * BATCH, KEY_DIM, torch.float32
        if case == "batch_repeat_interleave":
            layer.batch_repeat_interleave(3)
        elif case == "batch_select_indices":
            layer.batch_select_indices(torch.tensor([1]))
            new_batch = 1
        elif case == "reorder_cache":
            layer.reorder_cache(torch.arange(new_batch).flip(0))
        elif case == "bfloat16":
            dtype = torch.bfloat16
        elif case == "values_of_another_head_dim":
            new_batch, value_dim = BATCH, VALUE_DIM
        for step, length in enumerate((3, 1, 1, 1, 1)):
            keys = _states(new_batch, length, dtype=dtype)
            # DeepSeek-V4 shares keys and values (MQA with one KV projection)
            values = keys if name.startswith("deepseek_v4") else _states(new_batch, length, value_dim, dtype=dtype)
            expected = reference.update(keys.float(), values.float())
            if step == 0:
                torch.testing.assert_close(expected, (keys.float(), values.float()), rtol=0, atol=0)
            torch.testing.assert_close(layer.update(keys, values), expected, rtol=0, atol=0)
        self.assertEqual(layer.get_seq_length(), reference.get_seq_length())

    @parameterized.expand([("another_batch_size", 1), ("batch_repeat_interleave", 2)])
    def test_early_initialized_indexer_keys_take_the_shape_of_new_states(self, _, repeats):
        layer = DynamicIndexedLayer()
        fake = torch.zeros((BATCH, HEADS, 0, KEY_DIM))
        layer.lazy_initialization(fake, fake)
        layer.lazy_initialization_indexer(torch.zeros((BATCH, 0, KEY_DIM)))
        if repeats > 1:
            layer.batch_repeat_interleave(repeats)
        all_keys, all_indexer_keys = [], []
        for length in (3, 1):
            keys, indexer_keys = _states(2 * BATCH, length), torch.randn(2 * BATCH, length, KEY_DIM)
            all_keys.append(keys)
            all_indexer_keys.append(indexer_keys)
            torch.testing.assert_close(layer.update(keys, keys), (torch.cat(all_keys, dim=-2),) * 2)
            torch.testing.assert_close(layer.update_indexer(indexer_keys), torch.cat(all_indexer_keys, dim=1))

    def test_quantized_reorder_right_after_flush(self):
        layer = LosslessQuantizedLayer(residual_length=1)
        keys = _states(length=2)
        layer.update(keys, keys)
        new = _states(length=1)
        layer.update(new, new)  # flushes the residual window
        self.assertEqual(layer.keys.shape, (BATCH, HEADS, 0, KEY_DIM))
        layer.reorder_cache(torch.tensor([1, 0]))
        self.assertEqual(layer.keys.shape, (BATCH, HEADS, 0, KEY_DIM))
        last = _states(length=1)
        out_keys, _ = layer.update(last, last)
        torch.testing.assert_close(out_keys[:, :, :3], torch.cat([keys, new], dim=-2)[[1, 0]])
        torch.testing.assert_close(out_keys[:, :, 3:], last)


def _random_operations(seed, max_operations=8):
    """A seeded random sequence of cache operations (name, argument), and whether the layer starts initialized."""
    rng = random.Random(seed)
    operations = []
    for _ in range(rng.randint(0, max_operations)):
        name = rng.choice(["update", "crop", "repeat", "select", "reorder"])
        operations.append((name, rng.randint(1, 2) if name == "repeat" else rng.randint(0, 3)))
    return operations, rng.random() < 0.5


@require_torch
class DynamicLayerOperationsTest(unittest.TestCase):
    @parameterized.expand([(f"seed_{seed}", seed) for seed in range(40)])
    def test_matches_plain_tensors(self, _, seed):
        """A sequence of cache operations gives the states that the same operations on plain tensors give."""
        torch.manual_seed(seed)
        operations, early_init = _random_operations(seed)
        batch, value_dim = 2, 3
        ref_keys, ref_values = _states(batch, 0), _states(batch, 0, head_dim=value_dim)
        layer = DynamicLayer()
        if early_init:
            layer.lazy_initialization(ref_keys, ref_values)
        for op, arg in operations:
            if op == "update":
                keys, values = _states(batch, arg), _states(batch, arg, head_dim=value_dim)
                ref_keys, ref_values = torch.cat([ref_keys, keys], -2), torch.cat([ref_values, values], -2)
                layer.update(keys, values)
            elif op == "crop":
                arg = min(arg, ref_keys.shape[-2])
                ref_keys, ref_values = (
                    ref_keys[..., : ref_keys.shape[-2] - arg, :],
                    ref_values[..., : ref_values.shape[-2] - arg, :],
                )
                layer.crop(-arg)
            elif op == "repeat":
                ref_keys, ref_values = ref_keys.repeat_interleave(arg, 0), ref_values.repeat_interleave(arg, 0)
                batch *= arg
                layer.batch_repeat_interleave(arg)
            else:
                indices = torch.arange(batch)[arg % batch :] if op == "select" else torch.arange(batch).roll(arg)
                ref_keys, ref_values = ref_keys[indices], ref_values[indices]
                batch = len(indices)
                layer.batch_select_indices(indices) if op == "select" else layer.reorder_cache(indices)
            self.assertEqual(layer.get_seq_length(), ref_keys.shape[-2])
            if layer.is_initialized:
                # A layer without tokens keeps its shape through batch operations (the next states set it)
                self.assertEqual(layer.keys.dim(), 4)
                if ref_keys.shape[-2] > 0:
                    torch.testing.assert_close((layer.keys, layer.values), (ref_keys, ref_values))


def _tiny_model(name):
    """Tiny randomly initialized models, one per cache layout the patch touches."""
    common = {"vocab_size": 99, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if name == "gpt2":
        config = GPT2Config(n_layer=2, n_embd=32, n_head=4, n_positions=64, **common)
        model = GPT2LMHeadModel(config)
    elif name == "llama":
        config = LlamaConfig(
            num_hidden_layers=2, hidden_size=32, intermediate_size=37, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64, **common,
        )  # fmt: skip
        model = LlamaForCausalLM(config)
    elif name == "mistral_sliding_window":
        config = MistralConfig(
            num_hidden_layers=2, hidden_size=32, intermediate_size=37, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64, sliding_window=4, **common,
        )  # fmt: skip
        model = MistralForCausalLM(config)
    elif name == "deepseek_v3_mla":
        config = DeepseekV3Config(
            num_hidden_layers=2, hidden_size=32, intermediate_size=37, moe_intermediate_size=16, n_routed_experts=4,
            num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, num_attention_heads=4,
            num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16,
            v_head_dim=8, max_position_embeddings=64, **common,
        )  # fmt: skip
        model = DeepseekV3ForCausalLM(config)
    elif name == "bart":
        config = BartConfig(
            d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64, decoder_start_token_id=1, **common,
        )  # fmt: skip
        model = BartForConditionalGeneration(config)
    elif name == "deepseek_v4":
        config = DeepseekV4Config(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=4, head_dim=16, partial_rotary_factor=0.5,
            q_lora_rank=16, o_groups=2, o_lora_rank=16, index_n_heads=2, index_head_dim=8, index_topk=4,
            moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, sliding_window=4,
            compress_rates={"compressed_sparse_attention": 2, "heavily_compressed_attention": 4}, hc_mult=2,
            layer_types=["compressed_sparse_attention", "heavily_compressed_attention"], max_position_embeddings=64,
            num_nextn_predict_layers=0, **common,
        )  # fmt: skip
        model = DeepseekV4ForCausalLM(config)
    return model.eval()


NEED_A_CACHE = ("prompt_lookup_num_tokens", "prefill_chunk_size")
DECODER_ONLY = ["gpt2", "llama", "mistral_sliding_window", "deepseek_v3_mla"]
ALL_MODELS = DECODER_ONLY + ["bart"]


@require_torch
class EmptyCacheGenerateTest(unittest.TestCase):
    """
    `generate` with a cache gives the tokens of the same `generate` without a cache (every position recomputed from
    scratch), which the empty states of the cache layers cannot influence.
    """

    def setUp(self):
        torch.manual_seed(0)

    def _inputs(self, model, batch=2, length=7):
        input_ids = torch.randint(3, model.config.vocab_size, (batch, length))
        attention_mask = torch.ones_like(input_ids)
        attention_mask[0, :2] = 0  # left padding
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def _assert_same_as_without_cache(self, model, inputs, **kwargs):
        kwargs = {"max_new_tokens": 6, "min_new_tokens": 6, **kwargs}
        seed = torch.seed()
        torch.manual_seed(seed)
        with_cache = model.generate(**inputs, **kwargs)
        # the reference recomputes every position, with no cache and none of the options that need one
        reference_kwargs = {k: v for k, v in kwargs.items() if k not in ("cache", *NEED_A_CACHE)}
        torch.manual_seed(seed)
        without_cache = model.generate(**inputs, **reference_kwargs, use_cache=False)
        self.assertEqual(with_cache.tolist(), without_cache.tolist())
        return with_cache

    @parameterized.expand([(name,) for name in ALL_MODELS])
    def test_greedy(self, name):
        model = _tiny_model(name)
        self._assert_same_as_without_cache(model, self._inputs(model), do_sample=False)

    @parameterized.expand([(name,) for name in ALL_MODELS])
    def test_beam_search_with_num_return_sequences(self, name):
        model = _tiny_model(name)
        out = self._assert_same_as_without_cache(
            model, self._inputs(model), do_sample=False, num_beams=3, num_return_sequences=2
        )
        self.assertEqual(out.shape[0], 4)

    @parameterized.expand([(name,) for name in ALL_MODELS])
    def test_sampling(self, name):
        model = _tiny_model(name)
        self._assert_same_as_without_cache(model, self._inputs(model), do_sample=True, top_k=0, num_return_sequences=2)

    @parameterized.expand([(name,) for name in DECODER_ONLY + ["deepseek_v4"]])
    def test_early_initialized_cache_under_beam_search(self, name):
        """A cache initialized for the user's batch holds no token, and takes the batch size of the beams."""
        model = _tiny_model(name)
        inputs = self._inputs(model)
        # the per-layer shapes of the keys, read off a throwaway prefill (MLA values have another head dim)
        probe = DynamicCache(config=model.config)
        model(inputs["input_ids"][:1, :1], cache=probe)
        cache = DynamicCache(config=model.config)
        cache.early_initialization(
            batch_size=2,
            num_heads=[layer.keys.shape[1] for layer in probe.layers],
            head_dim=[layer.keys.shape[-1] for layer in probe.layers],
            dtype=torch.float32,
            device="cpu",
        )
        self._assert_same_as_without_cache(
            model, inputs, cache=cache, do_sample=False, num_beams=2, num_return_sequences=2
        )

    def test_early_initialized_reference_sliding_window_cache(self):
        """unlimited_ocr's prefill states early-initialized for batch size 2 take the batch size of the states."""
        config = UnlimitedOcrTextConfig(
            vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
            moe_intermediate_size=16, sliding_window=3, max_position_embeddings=64, pad_token_id=0,
        )  # fmt: skip
        model = UnlimitedOcrTextModel(config).eval()
        input_ids = torch.randint(3, 99, (4, 9))

        def prefill_then_decode(cache):
            hidden_states = [model(input_ids[:, :5], cache=cache).last_hidden_state]
            for i in range(5, 9):
                hidden_states.append(model(input_ids[:, i : i + 1], cache=cache).last_hidden_state)
            return torch.cat(hidden_states, dim=1)

        cache = DynamicCache(config=config)
        cache.early_initialization(2, 2, 8, torch.float32, "cpu")
        torch.testing.assert_close(prefill_then_decode(cache), prefill_then_decode(DynamicCache(config=config)))

    @parameterized.expand([("gpt2",), ("llama",)])
    def test_prompt_lookup_decoding_crops_the_cache(self, name):
        model = _tiny_model(name)
        pattern = torch.randint(3, 99, (1, 4))
        input_ids = torch.cat([pattern, pattern, pattern[:, :2]], dim=-1)
        inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        self._assert_same_as_without_cache(model, inputs, do_sample=False, prompt_lookup_num_tokens=3)

    @parameterized.expand([(name,) for name in DECODER_ONLY])
    def test_continue_from_cache(self, name):
        model = _tiny_model(name)
        inputs = self._inputs(model)
        first = model.generate(**inputs, max_new_tokens=3, do_sample=False, return_dict_in_generate=True)
        attention_mask = torch.cat([inputs["attention_mask"], torch.ones(2, 3, dtype=torch.long)], dim=-1)
        continued = model.generate(
            first.sequences, attention_mask=attention_mask, cache=first.cache,
            max_new_tokens=3, do_sample=False,
        )  # fmt: skip
        in_one_go = model.generate(**inputs, max_new_tokens=6, do_sample=False, use_cache=False)
        self.assertEqual(continued.tolist(), in_one_go.tolist())

    @parameterized.expand([("gpt2",), ("llama",)])
    def test_chunked_prefill(self, name):
        model = _tiny_model(name)
        inputs = self._inputs(model, batch=1, length=9)
        inputs["attention_mask"][:] = 1
        self._assert_same_as_without_cache(model, inputs, do_sample=False, prefill_chunk_size=4)

    @parameterized.expand([("gpt2",), ("llama",), ("deepseek_v3_mla",)])
    def test_quantized_cache_across_flushes(self, name):
        model = _tiny_model(name)
        cache = Cache(
            layers=[LosslessQuantizedLayer(residual_length=2) for _ in range(model.config.num_hidden_layers)]
        )
        self._assert_same_as_without_cache(model, self._inputs(model), cache=cache, do_sample=False)

    @parameterized.expand(
        [
            ("quanto", {"axis_key": 0, "axis_value": 0}),
            ("hqq", {"axis_key": 1, "axis_value": 1}),
            ("fp8", {}),
        ]
    )
    def test_library_quantized_cache_across_flushes(self, backend, axes):
        """The library backends (quanto and hqq where installed) keep rank-4 residual states across their flushes."""
        if backend == "quanto" and not is_optimum_quanto_available():
            self.skipTest("optimum-quanto is not installed")
        if backend == "hqq" and not is_hqq_available():
            self.skipTest("hqq is not installed")
        model = _tiny_model("llama")
        window = {} if backend == "fp8" else {"residual_length": 2, "q_group_size": 8, "nbits": 4, **axes}
        out = model.generate(
            **self._inputs(model), max_new_tokens=6, min_new_tokens=6, do_sample=False, return_dict_in_generate=True,
            cache_implementation="quantized", cache_config={"backend": backend, **window},
        )  # fmt: skip
        self.assertEqual(out.sequences.shape, (2, 13))
        for layer in out.cache.layers:
            self.assertEqual(layer.keys.dim(), 4)
            self.assertEqual(layer.get_seq_length(), 12)
