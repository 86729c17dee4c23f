"""
Custom 4D attention masks give the same result as the equivalent 2D padding mask, over model families, for the eager
and sdpa attention implementations, mask dtypes (boolean `True`=attend, or additive 0/`finfo.min`), mask widths (the
keys, or padded with masked columns to a static length longer than the keys) and phases (prefill, and one decode step
with a `StaticCache` or a `DynamicCache`). BLOOM (alibi) and MPT build on the 2D mask themselves, and are not covered.
"""

import functools
import unittest

from parameterized import parameterized

from transformers import is_torch_available
from transformers.testing_utils import require_torch, torch_device


if is_torch_available():
    import torch

    from transformers import (
        BertConfig,
        BertModel,
        DynamicCache,
        GPT2Config,
        GPT2LMHeadModel,
        StaticCache,
    )


BATCH_SIZE = 2
SEQ_LEN = 6
# Left padding of different lengths for the two rows
PAD_LENGTHS = (1, 3)
# `max_cache_len` of the `StaticCache`: the keys of every step, and the width of its exact masks
MAX_CACHE_LEN = 12
# Width of the "static" masks: longer than the keys in every phase
STATIC_LEN = 16
ATOL = 1e-4

_TOKENS = {"bos_token_id": 1, "eos_token_id": 2}
_COMMON = {**_TOKENS, "vocab_size": 99, "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4}
_GQA = {**_COMMON, "num_key_value_heads": 2, "intermediate_size": 37, "max_position_embeddings": 64}

# name -> (config class, model class, config kwargs, supported attention implementations)
# Only the names are used at import time, so that the module can be collected without torch
_FAMILY_SPECS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", _GQA, ("eager", "sdpa")),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", _GQA, ("eager", "sdpa")),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**_GQA, "head_dim": 8}, ("eager", "sdpa")),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {**_GQA, "pad_token_id": 0}, ("eager", "sdpa")),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {**_GQA, "head_dim": 8}, ("eager", "sdpa")),
    "mistral": (
        "MistralConfig",
        "MistralForCausalLM",
        {**_GQA, "sliding_window": None},
        ("eager", "sdpa"),
    ),
    "cohere": ("CohereConfig", "CohereForCausalLM", _GQA, ("eager", "sdpa")),
    "granite": ("GraniteConfig", "GraniteForCausalLM", _GQA, ("eager", "sdpa")),
    "olmo": ("OlmoConfig", "OlmoForCausalLM", _GQA, ("eager", "sdpa")),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", _GQA, ("eager", "sdpa")),
    "gpt_neox": (
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        {**_COMMON, "intermediate_size": 37, "max_position_embeddings": 64},
        ("eager", "sdpa"),
    ),
    "opt": (
        "OPTConfig",
        "OPTForCausalLM",
        {**_COMMON, "ffn_dim": 37, "word_embed_proj_dim": 32, "max_position_embeddings": 64, "pad_token_id": 0},
        ("eager", "sdpa"),
    ),
    "gpt2": (
        "GPT2Config",
        "GPT2LMHeadModel",
        {**_TOKENS, "vocab_size": 99, "n_layer": 2, "n_embd": 32, "n_head": 4, "n_positions": 64},
        ("eager", "sdpa"),
    ),
    "falcon": (
        "FalconConfig",
        "FalconForCausalLM",
        {**_COMMON, "num_kv_heads": 2, "new_decoder_architecture": True, "alibi": False},
        ("eager", "sdpa"),
    ),
    "gptj": (
        "GPTJConfig",
        "GPTJForCausalLM",
        {**_TOKENS, "vocab_size": 99, "n_layer": 2, "n_embd": 32, "n_head": 4, "n_positions": 64, "rotary_dim": 4},
        ("eager",),
    ),
}

ATTN_IMPLEMENTATIONS = ("eager", "sdpa")
MASK_KINDS = ("bool", "additive", "bool_static", "additive_static")
PHASES = ("prefill", "static_decode", "dynamic_decode")


def _matrix(implementations=ATTN_IMPLEMENTATIONS, mask_kinds=MASK_KINDS):
    return [
        (f"{family}_{impl}_{kind}_{phase}", family, impl, kind, phase)
        for family, (_, _, _, supported) in _FAMILY_SPECS.items()
        for impl in implementations
        if impl in supported
        for kind in mask_kinds
        for phase in PHASES
    ]


@functools.cache
def _get_model(family, attn_implementation):
    config_name, model_name, config_kwargs, _ = _FAMILY_SPECS[family]
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, config_name)(**config_kwargs)
    config._attn_implementation = attn_implementation
    model = getattr(transformers, model_name)(config).to(torch_device, dtype=torch.float32).eval()
    return model


def _padding_mask_2d(batch_size=BATCH_SIZE, seq_len=SEQ_LEN, pad_lengths=PAD_LENGTHS):
    mask = torch.ones(batch_size, seq_len, dtype=torch.long, device=torch_device)
    for row, pad in enumerate(pad_lengths):
        mask[row, :pad] = 0
    return mask


def _position_ids(mask_2d):
    # Same as `generate`: positions counted from the first non-padding token
    position_ids = mask_2d.long().cumsum(-1) - 1
    return position_ids.masked_fill(mask_2d == 0, 1)


def _to_kind(bool_mask, kind, dtype):
    if kind.startswith("bool"):
        return bool_mask
    zero = torch.zeros((), dtype=dtype, device=bool_mask.device)
    return torch.where(bool_mask, zero, torch.finfo(dtype).min).to(dtype)


def build_4d_mask(mask_2d, query_length, kind, dtype=None, key_length=None, causal=True):
    """
    Equivalent of the 2D padding mask `mask_2d` (batch, seen_tokens) for the last `query_length` tokens: shape
    (batch, 1, query_length, key_length). `key_length` defaults to `seen_tokens` (or `STATIC_LEN` for the "static"
    kinds); columns beyond the seen tokens are masked.
    """
    batch_size, seen_tokens = mask_2d.shape
    dtype = dtype if dtype is not None else torch.float32
    if kind.endswith("static"):
        key_length = STATIC_LEN
    elif key_length is None:
        key_length = seen_tokens
    device = mask_2d.device
    key_padding = torch.zeros(batch_size, key_length, dtype=torch.bool, device=device)
    key_padding[:, :seen_tokens] = mask_2d.bool()
    q_positions = torch.arange(seen_tokens - query_length, seen_tokens, device=device)
    k_positions = torch.arange(key_length, device=device)
    allowed = key_padding[:, None, None, :].expand(batch_size, 1, query_length, key_length)
    if causal:
        allowed = allowed & (k_positions[None, :] <= q_positions[:, None])[None, None]
    return _to_kind(allowed, kind, dtype)


def _make_cache(phase, model):
    if phase == "static_decode":
        return StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
    if phase == "dynamic_decode":
        return DynamicCache(config=model.config)
    return None


def _forward(model, input_ids, mask, position_ids, cache):
    kwargs = {"input_ids": input_ids, "attention_mask": mask, "position_ids": position_ids}
    if cache is not None:
        kwargs.update(cache=cache, use_cache=True)
    with torch.no_grad():
        return model(**kwargs).logits


def _max_diff(a, b, rows_mask):
    # Only compare non-padding query rows
    diff = (a.float() - b.float()).abs().amax(-1)  # (batch, q)
    diff = diff[rows_mask.bool()]
    if torch.isnan(diff).any():
        return float("nan")
    return diff.max().item()


def compare_4d_with_2d(family, attn_implementation, kind, phase):
    """
    Returns a dict with the max |logits(4D) - logits(2D)| over the non-padding query rows of the prefill and, for the
    decode phases, of the decode step. Exceptions raised by the 4D forward propagate.
    """
    model = _get_model(family, attn_implementation)
    dtype = model.dtype
    mask_2d = _padding_mask_2d()
    torch.manual_seed(1)
    input_ids = torch.randint(3, model.config.vocab_size, (BATCH_SIZE, SEQ_LEN), device=torch_device)
    next_ids = torch.randint(3, model.config.vocab_size, (BATCH_SIZE, 1), device=torch_device)
    position_ids = _position_ids(mask_2d)

    # With a static cache, the keys are the cache's length at every step
    key_length = MAX_CACHE_LEN if phase == "static_decode" else None

    # Reference run with the 2D mask
    ref_cache = _make_cache(phase, model)
    ref_prefill = _forward(model, input_ids, mask_2d, position_ids, ref_cache)

    # Same run with the 4D mask
    cache = _make_cache(phase, model)
    mask_4d = build_4d_mask(mask_2d, SEQ_LEN, kind, dtype, key_length)
    prefill = _forward(model, input_ids, mask_4d, position_ids, cache)
    result = {"prefill": _max_diff(prefill, ref_prefill, mask_2d)}

    if phase != "prefill":
        decode_mask_2d = torch.cat([mask_2d, torch.ones_like(mask_2d[:, :1])], dim=-1)
        decode_position_ids = position_ids[:, -1:] + 1
        ref_decode = _forward(model, next_ids, decode_mask_2d, decode_position_ids, ref_cache)
        decode_mask_4d = build_4d_mask(decode_mask_2d, 1, kind, dtype, key_length)
        decode = _forward(model, next_ids, decode_mask_4d, decode_position_ids, cache)
        result["decode"] = _max_diff(decode, ref_decode, torch.ones_like(next_ids))
    return result


def _shape_regex(shape):
    # Accept `(2, 1, 3, 5)`, `[2, 1, 3, 5]` and `torch.Size([2, 1, 3, 5])`
    return r"[\(\[]" + r",\s*".join(str(s) for s in shape) + r"[\)\]]"


@require_torch
class Custom4DAttentionMaskTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The models are tiny: intra-op parallelism only adds synchronization overhead on CPU
        cls._num_threads = torch.get_num_threads()
        torch.set_num_threads(1)

    @classmethod
    def tearDownClass(cls):
        torch.set_num_threads(cls._num_threads)

    def assert_matches_2d(self, family, attn_implementation, kind, phase):
        diffs = compare_4d_with_2d(family, attn_implementation, kind, phase)
        for step, diff in diffs.items():
            self.assertTrue(
                diff < ATOL,  # also False for NaN
                f"{family}/{attn_implementation}/{kind}/{phase}: max|diff| 4D vs 2D mask = {diff} ({step})",
            )

    @parameterized.expand(_matrix())
    def test_4d_mask_matches_2d_mask(self, _, family, attn_implementation, kind, phase):
        self.assert_matches_2d(family, attn_implementation, kind, phase)

    @parameterized.expand(
        [
            (f"{family}_{impl}_{kind}", family, impl, kind)
            for family, (_, _, _, supported) in _FAMILY_SPECS.items()
            for impl in ATTN_IMPLEMENTATIONS
            if impl in supported
            for kind in ("bool", "additive")
        ]
    )
    def test_packed_sequences_4d_mask(self, _, family, attn_implementation, kind):
        """
        Rows packing two sequences, with a block-diagonal causal mask and the positions of each sequence: the logits
        of the sequences run separately.
        """
        model = _get_model(family, attn_implementation)
        lengths = (2, SEQ_LEN - 2)
        torch.manual_seed(1)
        input_ids = torch.randint(3, model.config.vocab_size, (BATCH_SIZE, SEQ_LEN), device=torch_device)
        allowed = torch.zeros(SEQ_LEN, SEQ_LEN, dtype=torch.bool, device=torch_device)
        positions, start = [], 0
        for length in lengths:
            allowed[start : start + length, start : start + length] = torch.ones(length, length).tril().bool()
            positions += list(range(length))
            start += length
        mask_4d = _to_kind(allowed[None, None].expand(BATCH_SIZE, 1, -1, -1), kind, model.dtype)
        position_ids = torch.tensor([positions] * BATCH_SIZE, device=torch_device)
        with torch.no_grad():
            out = model(input_ids=input_ids, attention_mask=mask_4d, position_ids=position_ids).logits
            ref = torch.cat([model(input_ids=ids).logits for ids in input_ids.split(lengths, dim=1)], dim=1)
        torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)

    @parameterized.expand(
        [
            (f"{impl}_{kind}", impl, kind)
            for impl in ATTN_IMPLEMENTATIONS
            for kind in ("bool", "additive", "bool_static", "additive_static")
        ]
    )
    def test_batch_broadcast_4d_mask(self, _, attn_implementation, kind):
        """A (1, 1, q_len, kv_len) causal mask is broadcast over the batch (no padding)."""
        model = _get_model("llama", attn_implementation)
        input_ids = torch.randint(3, model.config.vocab_size, (BATCH_SIZE, SEQ_LEN), device=torch_device)
        mask_2d = torch.ones(BATCH_SIZE, SEQ_LEN, dtype=torch.long, device=torch_device)
        mask_4d = build_4d_mask(mask_2d[:1], SEQ_LEN, kind, model.dtype)
        self.assertEqual(mask_4d.shape[0], 1)
        # with a cache, so that a mask longer than the keys is cut to them
        with torch.no_grad():
            ref = model(input_ids=input_ids, attention_mask=mask_2d, cache=DynamicCache(config=model.config))
            out = model(input_ids=input_ids, attention_mask=mask_4d, cache=DynamicCache(config=model.config))
        ref, out = ref.logits, out.logits
        torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)

    @parameterized.expand(
        [
            (f"{impl}_{kind}_{q}", impl, kind, q)
            for impl in ATTN_IMPLEMENTATIONS
            for kind in ("bool", "additive")
            for q in ("1", "q")
        ]
    )
    def test_bidirectional_4d_mask(self, _, attn_implementation, kind, query_dim):
        """Encoder self-attention (`create_bidirectional_mask`): (batch, 1, 1, kv_len) and (batch, 1, q, kv_len)."""
        torch.manual_seed(0)
        config = BertConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37
        )
        config._attn_implementation = attn_implementation
        model = BertModel(config).to(torch_device).eval()
        mask_2d = _padding_mask_2d()
        input_ids = torch.randint(3, 99, (BATCH_SIZE, SEQ_LEN), device=torch_device)
        mask_4d = _to_kind(mask_2d.bool()[:, None, None, :], kind, model.dtype)
        if query_dim == "q":
            mask_4d = mask_4d.expand(-1, -1, SEQ_LEN, -1)
        with torch.no_grad():
            ref = model(input_ids=input_ids, attention_mask=mask_2d).last_hidden_state
            out = model(input_ids=input_ids, attention_mask=mask_4d).last_hidden_state
        rows = mask_2d.bool()
        torch.testing.assert_close(out[rows], ref[rows], atol=ATOL, rtol=0)

    @parameterized.expand(
        [(f"{impl}_{kind}", impl, kind) for impl in ATTN_IMPLEMENTATIONS for kind in ("bool", "additive")]
    )
    def test_sliding_window_model_takes_the_4d_mask_as_it_is(self, _, attn_implementation, kind):
        """
        A model with sliding-window layers uses a 4D mask handed to it as it is, for all its layers: the logits of the
        same weights without a sliding window.
        """
        import transformers

        config_kwargs = {**_FAMILY_SPECS["mistral"][2], "sliding_window": 3}
        models = []
        for sliding_window in (3, None):
            torch.manual_seed(0)
            config = transformers.MistralConfig(**{**config_kwargs, "sliding_window": sliding_window})
            config._attn_implementation = attn_implementation
            models.append(transformers.MistralForCausalLM(config).to(torch_device).eval())
        mask_2d = _padding_mask_2d()
        input_ids = torch.randint(3, 99, (BATCH_SIZE, SEQ_LEN), device=torch_device)
        mask_4d = build_4d_mask(mask_2d, SEQ_LEN, kind, torch.float32)
        with torch.no_grad():
            sliding, full = (model(input_ids=input_ids, attention_mask=mask_4d).logits for model in models)
        rows = mask_2d.bool()
        torch.testing.assert_close(sliding[rows], full[rows], atol=ATOL, rtol=0)

    @parameterized.expand(
        [
            (f"{impl}_{kind}_{q}", impl, kind, q)
            for impl in ATTN_IMPLEMENTATIONS
            for kind in ("bool", "additive")
            for q in ("1", "q")
        ]
    )
    def test_cross_attention_4d_mask(self, _, attn_implementation, kind, query_dim):
        """GPT2 cross-attention `encoder_attention_mask`: (batch, 1, 1, enc_len) and (batch, 1, q_len, enc_len)."""
        torch.manual_seed(0)
        config = GPT2Config(vocab_size=99, n_layer=2, n_embd=32, n_head=4, n_positions=64, add_cross_attention=True)
        config._attn_implementation = attn_implementation
        model = GPT2LMHeadModel(config).to(torch_device).eval()
        enc_len = 7
        encoder_mask_2d = _padding_mask_2d(seq_len=enc_len, pad_lengths=(0, 2))
        encoder_hidden_states = torch.randn(BATCH_SIZE, enc_len, 32, device=torch_device)
        input_ids = torch.randint(3, 99, (BATCH_SIZE, SEQ_LEN), device=torch_device)
        encoder_mask_4d = _to_kind(encoder_mask_2d.bool()[:, None, None, :], kind, model.dtype)
        if query_dim == "q":
            encoder_mask_4d = encoder_mask_4d.expand(-1, -1, SEQ_LEN, -1)
        kwargs = {"input_ids": input_ids, "encoder_hidden_states": encoder_hidden_states}
        with torch.no_grad():
            ref = model(**kwargs, encoder_attention_mask=encoder_mask_2d).logits
            out = model(**kwargs, encoder_attention_mask=encoder_mask_4d).logits
        torch.testing.assert_close(out, ref, atol=ATOL, rtol=0)

    @parameterized.expand(
        [
            (f"{impl}_{case}", impl, case)
            for impl in ATTN_IMPLEMENTATIONS
            for case in ("wrong_query_length", "short_key_length", "short_key_length_decode")
        ]
    )
    def test_non_broadcastable_4d_mask_raises(self, _, attn_implementation, case):
        """A mask that cannot broadcast to (batch, heads, q_len, kv_len) raises a `ValueError` naming both shapes."""
        model = _get_model("llama", attn_implementation)
        seq_len = 5
        input_ids = torch.randint(3, model.config.vocab_size, (BATCH_SIZE, seq_len), device=torch_device)
        mask_2d = torch.ones(BATCH_SIZE, seq_len, dtype=torch.long, device=torch_device)
        # with a cache, the mask functions know the number of keys
        cache = DynamicCache(config=model.config)
        if case == "wrong_query_length":
            # 3 query rows for 5 query tokens
            bad_mask = build_4d_mask(mask_2d, 3, "bool")
            expected_q, expected_kv = seq_len, seq_len
        elif case == "short_key_length":
            # 4 key columns for 5 keys
            bad_mask = build_4d_mask(mask_2d, seq_len, "bool")[..., :4]
            expected_q, expected_kv = seq_len, seq_len
        else:
            # decode step after a 5 token prefill: 5 key columns for 6 keys
            with torch.no_grad():
                model(input_ids=input_ids, attention_mask=mask_2d, cache=cache, use_cache=True)
            input_ids = input_ids[:, :1]
            bad_mask = build_4d_mask(mask_2d, 1, "additive")
            expected_q, expected_kv = 1, seq_len + 1

        with self.assertRaises(ValueError) as context:
            with torch.no_grad():
                model(input_ids=input_ids, attention_mask=bad_mask, cache=cache, use_cache=True)
        message = str(context.exception)
        self.assertRegex(message, _shape_regex(tuple(bad_mask.shape)), "the received shape should be in the message")
        self.assertRegex(
            message,
            r"[\(\[]\s*" + str(BATCH_SIZE) + r",\s*\w+,\s*" + f"{expected_q},\\s*{expected_kv}" + r"[\)\]]",
            "the expected (batch, heads, q_len, kv_len) shape should be in the message",
        )
