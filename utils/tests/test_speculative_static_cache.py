"""Assisted and prompt lookup decoding with a static cache (patches 13 and 20), the broad matrix: full attention,
sliding window and mixed models, windows shorter and longer than the prompt, prompt lookup and an assistant, a static
and a passed cache, eager and compiled, seeded speculative sampling, a cache used again; each against the dynamic
cache's tokens and scores. And what patch 20 leaves alone: a user's subclass with its own `update`, the hybrid linear
and sliding window layer, a cache without past recording."""

import copy
import itertools
import subprocess
import sys
import textwrap
import unittest

import torch
from parameterized import parameterized

from transformers import (
    CompileConfig,
    Gemma2Config,
    Gemma2ForCausalLM,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    StaticCache,
)
from transformers.cache_utils import LinearAttentionAndStaticSlidingWindowAttentionLayer, StaticSlidingWindowLayer


PROMPTS = {
    "repeating": [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]],
    "short": [[3, 4, 5, 3, 4]],
    "no_repeat": [[9, 10, 11, 12, 13, 14, 15]],
}
GENERATE_KWARGS = {"eos_token_id": None, "pad_token_id": 0, "return_dict_in_generate": True, "output_scores": True}


def _model(model_type, window=4, num_hidden_layers=2):
    torch.manual_seed(0)
    kwargs = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    kwargs |= {"num_hidden_layers": num_hidden_layers, "vocab_size": 128}
    if model_type == "llama":
        return LlamaForCausalLM(LlamaConfig(**kwargs)).eval()
    if model_type == "mistral":
        return MistralForCausalLM(MistralConfig(sliding_window=window, **kwargs)).eval()
    return Gemma2ForCausalLM(Gemma2Config(sliding_window=window, head_dim=8, **kwargs)).eval()


def _generate(model, prompt, candidates, cache, max_new_tokens, window=4, seed=None, **kwargs):
    input_ids = torch.tensor(PROMPTS[prompt])
    if candidates == "prompt_lookup":
        kwargs["prompt_lookup_num_tokens"] = 3
    else:
        kwargs["assistant_model"] = _model(model.config.model_type, window, num_hidden_layers=1)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    elif cache == "passed":
        kwargs["cache"] = StaticCache(config=model.config, max_cache_len=input_ids.shape[1] + max_new_tokens + 5)
    if seed is not None:
        torch.manual_seed(seed)
    return model.generate(input_ids, max_new_tokens=max_new_tokens, **kwargs, **GENERATE_KWARGS)


def _compile_config():
    config = CompileConfig(fullgraph=True)
    config._compile_all_devices = True
    return config


CASES = [
    (model_type, window, prompt, candidates, cache)
    for model_type, window, prompt, candidates, cache in itertools.product(
        ["llama", "mistral", "gemma2"], [4, 16], PROMPTS, ["prompt_lookup", "assistant"], ["static", "passed"]
    )
    if not (model_type == "llama" and window == 16)
]


class SpeculativeStaticCacheTest(unittest.TestCase):
    def assert_same_outputs(self, outputs, expected):
        self.assertEqual(outputs.sequences.tolist(), expected.sequences.tolist())
        self.assertEqual(len(outputs.scores), len(expected.scores))
        for scores, expected_scores in zip(outputs.scores, expected.scores):
            torch.testing.assert_close(scores, expected_scores)

    @parameterized.expand(CASES)
    def test_static_cache_gives_the_dynamic_cache_outputs(self, model_type, window, prompt, candidates, cache):
        model = _model(model_type, window)
        expected = _generate(model, prompt, candidates, "dynamic", 12, window, do_sample=False)
        outputs = _generate(model, prompt, candidates, cache, 12, window, do_sample=False)
        self.assert_same_outputs(outputs, expected)

    @parameterized.expand([("llama", "prompt_lookup"), ("mistral", "assistant"), ("gemma2", "prompt_lookup")])
    def test_compiled_static_cache_gives_the_dynamic_cache_outputs(self, model_type, candidates):
        model = _model(model_type)
        expected = _generate(model, "repeating", candidates, "dynamic", 20, do_sample=False)
        outputs = _generate(
            model, "repeating", candidates, "static", 20, do_sample=False, compile_config=_compile_config()
        )
        self.assert_same_outputs(outputs, expected)

    @parameterized.expand([("mistral",), ("gemma2",)])
    def test_seeded_speculative_sampling(self, model_type):
        model = _model(model_type)
        expected = _generate(model, "repeating", "assistant", "dynamic", 16, seed=3, do_sample=True)
        outputs = _generate(model, "repeating", "assistant", "static", 16, seed=3, do_sample=True)
        self.assert_same_outputs(outputs, expected)

    def test_passed_cache_used_again_for_a_compiled_regular_call(self):
        # The cache keeps recording after assisted decoding, as a dynamic sliding window layer does
        model = _model("mistral")
        input_ids = torch.tensor(PROMPTS["repeating"])
        cache = StaticCache(config=model.config, max_cache_len=40)
        kwargs = {"max_new_tokens": 16, "do_sample": False, "eos_token_id": None, "pad_token_id": 0}
        model.generate(input_ids, prompt_lookup_num_tokens=3, cache=cache, **kwargs)
        cache.reset()
        outputs = model.generate(input_ids, cache=cache, compile_config=_compile_config(), **kwargs)
        expected = model.generate(input_ids, cache=StaticCache(config=model.config, max_cache_len=40), **kwargs)
        self.assertEqual(outputs.tolist(), expected.tolist())


class RollbackLeftAloneTest(unittest.TestCase):
    def test_subclass_with_its_own_update_does_not_record(self):
        class Layer(StaticSlidingWindowLayer):
            def update(self, key_states, value_states, *args, **kwargs):
                return super().update(key_states, value_states, *args, **kwargs)

        layer = Layer(max_cache_len=32, sliding_window=4)
        layer.activate_past_recording()
        self.assertFalse(layer.is_croppable)
        layer.update(torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8))
        self.assertIsNone(layer._rollback)

    def test_hybrid_layer_does_not_record_its_attention_states(self):
        layer = LinearAttentionAndStaticSlidingWindowAttentionLayer(32, 4)
        layer.activate_past_recording(recurrent_states_to_keep=3)
        layer.update(torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8))
        self.assertIsNone(layer._rollback)

    def test_without_past_recording_nothing_is_kept(self):
        layer = StaticSlidingWindowLayer(max_cache_len=32, sliding_window=4)
        self.assertFalse(layer.is_croppable)
        layer.update(torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8))
        self.assertIsNone(layer._rollback)

    def test_below_the_window_crop_moves_the_length_back_as_before(self):
        # Nothing was evicted: removing more tokens than the last update wrote is pristine's subtraction, no error
        layer = StaticSlidingWindowLayer(max_cache_len=32, sliding_window=4)
        layer.activate_past_recording()
        states = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
        layer.update(states[0][:, :, :2], states[1][:, :, :2])
        layer.update(states[0][:, :, 2:], states[1][:, :, 2:])
        layer.crop(-3)
        self.assertEqual(layer.get_seq_length(), 0)


def _counting_compile_config(graphs, dynamic=False):
    def backend(graph_module, example_inputs, **kwargs):
        graphs.append(example_inputs)
        return graph_module.forward

    config = CompileConfig(backend=backend, mode=None, dynamic=dynamic)
    config._compile_all_devices = True
    return config


class FixedVerificationTest(unittest.TestCase):
    """Patch 25, beyond its own tests: what its compiled verification of fixed length leaves as it was."""

    def setUp(self):
        torch.compiler.reset()

    def test_second_call_compiles_nothing_and_keeps_the_cache_size(self):
        # The cache `generate` makes gets room for the padding once, then `_previous_max_cache_length` holds it
        model = _model("llama")
        expected = _generate(model, "repeating", "prompt_lookup", "dynamic", 20, do_sample=False)
        graphs = []
        config = _counting_compile_config(graphs)
        first = _generate(model, "repeating", "prompt_lookup", "static", 20, do_sample=False, compile_config=config)
        compiled = len(graphs)
        second = _generate(model, "repeating", "prompt_lookup", "static", 20, do_sample=False, compile_config=config)
        self.assertEqual(len(graphs), compiled)
        self.assertEqual(compiled, 1)
        # `max_length - 1` positions, and 3 for the padding
        self.assertEqual(first.past_key_values.get_max_length(), 10 + 20 - 1 + 3)
        self.assertEqual(first.past_key_values.get_max_length(), second.past_key_values.get_max_length())
        SpeculativeStaticCacheTest.assert_same_outputs(self, second, expected)

    @parameterized.expand([("llama",), ("mistral",), ("gemma2",)])
    def test_compiled_seeded_speculative_sampling(self, model_type):
        model = _model(model_type)
        expected = _generate(model, "repeating", "assistant", "dynamic", 16, seed=3, do_sample=True)
        outputs = _generate(
            model, "repeating", "assistant", "static", 16, seed=3, do_sample=True, compile_config=_compile_config()
        )
        SpeculativeStaticCacheTest.assert_same_outputs(self, outputs, expected)

    @parameterized.expand([("prompt_lookup",), ("assistant",)])
    def test_compiled_with_an_eos_token(self, candidates):
        model = _model("gemma2")
        tokens = _generate(model, "repeating", candidates, "dynamic", 20, do_sample=False).sequences[0, 10:].tolist()
        # An eos token that the model produces in the middle of the generation
        eos = {"eos_token_id": tokens[7]}
        kwargs = {k: v for k, v in GENERATE_KWARGS.items() if k != "eos_token_id"} | eos
        input_ids = torch.tensor(PROMPTS["repeating"])
        extra = (
            {"prompt_lookup_num_tokens": 3}
            if candidates == "prompt_lookup"
            else {"assistant_model": _model("gemma2", num_hidden_layers=1)}
        )
        expected = model.generate(input_ids, max_new_tokens=20, **extra, **kwargs)
        outputs = model.generate(
            input_ids,
            max_new_tokens=20,
            cache_implementation="static",
            compile_config=_compile_config(),
            **extra,
            **kwargs,
        )
        SpeculativeStaticCacheTest.assert_same_outputs(self, outputs, expected)

    def test_compiled_with_attentions_is_not_padded(self):
        # The attentions returned per token hold the verified positions only: such a call verifies the candidates alone
        model = _model("llama")
        kwargs = {"output_attentions": True, "output_hidden_states": True}
        model.config._attn_implementation = "eager"
        expected = _generate(model, "repeating", "prompt_lookup", "dynamic", 12, do_sample=False, **kwargs)
        outputs = _generate(
            model,
            "repeating",
            "prompt_lookup",
            "static",
            12,
            do_sample=False,
            compile_config=_compile_config(),
            **kwargs,
        )
        SpeculativeStaticCacheTest.assert_same_outputs(self, outputs, expected)
        self.assertEqual(len(outputs.attentions), len(expected.attentions))
        for attentions, expected_attentions in zip(outputs.attentions, expected.attentions):
            self.assertEqual(attentions[0].shape[2], expected_attentions[0].shape[2])
        for hidden, expected_hidden in zip(outputs.hidden_states, expected.hidden_states):
            self.assertEqual(hidden[0].shape, expected_hidden[0].shape)

    @parameterized.expand(itertools.product(["mistral", "gemma2"], [8, 16], ["prompt_lookup", "assistant"]))
    def test_compiled_sliding_window_not_full_yet(self, model_type, window, candidates):
        # A window longer than the prompt: the layers write in place until it fills
        model = _model(model_type, window)
        expected = _generate(model, "repeating", candidates, "dynamic", 20, window, do_sample=False)
        outputs = _generate(
            model, "repeating", candidates, "static", 20, window, do_sample=False, compile_config=_compile_config()
        )
        SpeculativeStaticCacheTest.assert_same_outputs(self, outputs, expected)

    @parameterized.expand([("mistral", "static"), ("gemma2", "static"), ("mistral", "passed_shorter_than_window")])
    def test_sliding_window_models_are_padded(self, model_type, cache):
        # Patch 26: their verification is padded too, and is one graph after the first (which reads the length the
        # prefill left on the host). A window longer than the passed cache slides on the padding, and `crop` puts it
        # back: the candidates attend to every position
        window = 64 if cache.startswith("passed") else 4
        model = _model(model_type, window)
        expected = _generate(model, "repeating", "prompt_lookup", "dynamic", 20, window, do_sample=False)
        lengths, graphs = [], []
        get_compiled_call = model.get_compiled_call

        def recording(config):
            call = get_compiled_call(config)

            def run(**kwargs):
                lengths.append((kwargs["input_ids"].shape[1], len(graphs)))
                return call(**kwargs)

            return run

        model.get_compiled_call = recording
        kwargs = {"compile_config": _counting_compile_config(graphs), "do_sample": False}
        if cache == "static":
            outputs = _generate(model, "repeating", "prompt_lookup", "static", 20, window, **kwargs)
        else:
            passed = StaticCache(config=model.config, max_cache_len=10 + 20 - 1)
            input_ids = torch.tensor(PROMPTS["repeating"])
            kwargs |= {"cache": passed, "prompt_lookup_num_tokens": 3} | GENERATE_KWARGS
            outputs = model.generate(input_ids, max_new_tokens=20, **kwargs)
        SpeculativeStaticCacheTest.assert_same_outputs(self, outputs, expected)
        self.assertEqual({length for length, _ in lengths}, {4})
        self.assertEqual(len(graphs), 2)
        self.assertEqual({count for _, count in lengths[2:]}, {2})

    def test_the_declared_bound_binds_to_the_class_that_defines_the_methods(self):
        from transformers.generation.candidate_generator import (
            AssistedCandidateGenerator,
            PromptLookupCandidateGenerator,
        )

        self.assertEqual(PromptLookupCandidateGenerator(num_output_tokens=3, max_length=20).max_drafting_tokens, 3)

        class OwnStrategy(PromptLookupCandidateGenerator):
            def update_candidate_strategy(self, input_ids, scores, num_matches):
                self.num_output_tokens += 1

        self.assertIsNone(OwnStrategy(num_output_tokens=3, max_length=20).max_drafting_tokens)
        model, assistant = _model("llama"), _model("llama", num_hidden_layers=1)
        assistant.generation_config.num_assistant_tokens = 4
        input_ids = torch.tensor(PROMPTS["repeating"])

        def bound(generator_class, schedule="constant"):
            assistant.generation_config.num_assistant_tokens_schedule = schedule
            generation_config = copy.deepcopy(model.generation_config)
            generator = generator_class(input_ids, assistant, generation_config, {})
            return generator.max_drafting_tokens

        class OwnLengths(AssistedCandidateGenerator):
            def _calculate_new_tokens(self, input_ids):
                return super()._calculate_new_tokens(input_ids)

        self.assertEqual(bound(AssistedCandidateGenerator), 4)
        self.assertIsNone(bound(AssistedCandidateGenerator, "heuristic"))
        self.assertIsNone(bound(OwnLengths))

    def test_learned_positions_are_not_padded_past_the_model_positions(self):
        # GPT-2 has 24 positions: the padding stops where its positions would pass them
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=24, n_embd=32, n_layer=2, n_head=4)).eval()
        input_ids = torch.tensor(PROMPTS["repeating"])
        kwargs = {"max_new_tokens": 14, "prompt_lookup_num_tokens": 10, "do_sample": False} | GENERATE_KWARGS
        expected = model.generate(input_ids, **kwargs)
        outputs = model.generate(input_ids, cache_implementation="static", compile_config=_compile_config(), **kwargs)
        SpeculativeStaticCacheTest.assert_same_outputs(self, outputs, expected)
        self.assertLessEqual(outputs.past_key_values.get_max_length(), 24)

    def test_heuristic_schedule_gives_the_dynamic_cache_outputs(self):
        # The bound moves: the generator declares none, and the verification takes the candidates alone
        model = _model("mistral")
        input_ids = torch.tensor(PROMPTS["repeating"])
        assistant = _model("mistral", num_hidden_layers=1)
        assistant.generation_config.num_assistant_tokens = 2
        assistant.generation_config.num_assistant_tokens_schedule = "heuristic"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        kwargs = {"assistant_model": assistant, "max_new_tokens": 24, "do_sample": False} | GENERATE_KWARGS
        expected = model.generate(input_ids, **kwargs)
        assistant.generation_config.num_assistant_tokens = 2
        outputs = model.generate(input_ids, cache_implementation="static", compile_config=_compile_config(), **kwargs)
        SpeculativeStaticCacheTest.assert_same_outputs(self, outputs, expected)

    def test_eager_verification_is_not_padded(self):
        model = _model("llama")
        lengths = []
        model.register_forward_pre_hook(
            lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
        )
        expected = _generate(model, "repeating", "prompt_lookup", "dynamic", 12, do_sample=False)
        dynamic_lengths, lengths[:] = list(lengths), []
        outputs = _generate(model, "repeating", "prompt_lookup", "static", 12, do_sample=False)
        SpeculativeStaticCacheTest.assert_same_outputs(self, outputs, expected)
        self.assertEqual(lengths, dynamic_lengths)
        self.assertIn(1, lengths)
        self.assertEqual(outputs.past_key_values.get_max_length(), 10 + 12 - 1)

    @parameterized.expand([("Llama", "", "1"), ("Mistral", "sliding_window=4", "2")])
    def test_default_dynamic_compiles_without_symint_in_a_fresh_process(self, model_type, window, expected_graphs):
        # `CompileConfig`'s `dynamic=None`: a second shape would make dynamo compile a graph with `SymInt` inputs. A
        # fresh process, as dynamo marks dimensions dynamic from earlier graphs of the same code. Past a sliding
        # window (patch 26), the first verification reads the length the prefill left on the host: a second graph
        template = textwrap.dedent(
            """
            import torch
            from transformers import CompileConfig, MODELConfig, MODELForCausalLM

            torch.manual_seed(0)
            config = MODELConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                 num_key_value_heads=2, num_hidden_layers=2, vocab_size=128, WINDOW)
            model = MODELForCausalLM(config).eval()
            graphs = []

            def backend(graph_module, example_inputs, **kwargs):
                graphs.append(example_inputs)
                return graph_module.forward

            compile_config = CompileConfig(backend=backend, mode=None, dynamic=None)
            compile_config._compile_all_devices = True
            input_ids = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]])
            kwargs = {"max_new_tokens": 32, "do_sample": False, "eos_token_id": None, "pad_token_id": 0,
                      "prompt_lookup_num_tokens": 3}
            expected = model.generate(input_ids, **kwargs)
            outputs = model.generate(input_ids, cache_implementation="static", compile_config=compile_config, **kwargs)
            assert outputs.tolist() == expected.tolist()
            print(len(graphs), sum(not isinstance(x, torch.Tensor) for inputs in graphs for x in inputs))
            """
        )
        script = template.replace("MODEL", model_type).replace("WINDOW", window)
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertEqual(result.stdout.split()[-2:], [expected_graphs, "0"])


class LengthOnTheDeviceTest(unittest.TestCase):
    """Patch 26: after a traced update, updates of several tokens read the length on the device, eager ones too."""

    def setUp(self):
        torch.compiler.reset()

    @parameterized.expand(
        [("mistral", "sdpa", 4), ("mistral", "eager", 4), ("gemma2", "eager", 4), ("mistral", "sdpa", 16)]
    )
    def test_eager_and_compiled_calls_of_any_length_mixed(self, model_type, attn_implementation, window):
        # After each call, the first layer's length is read back (as a model's forward does without position ids): the
        # other layers must still agree with it on what the next mask holds, also before the window fills
        model = _model(model_type, window, num_hidden_layers=3)
        model.set_attn_implementation(attn_implementation)
        input_ids = torch.randint(3, 99, (1, 30), generator=torch.Generator().manual_seed(0))
        step = torch.compile(model.forward, backend="eager", fullgraph=True, dynamic=False)
        cache, eager_cache = (StaticCache(config=model.config, max_cache_len=40) for _ in range(2))
        calls = [(3, False), (1, True), (1, True), (3, False), (1, True), (2, False), (4, True), (3, True), (3, False)]
        calls += [(1, False), (5, False)]
        position = 0
        with torch.no_grad():
            for length, compiled in calls:
                chunk = input_ids[:, position : position + length]
                logits = (step if compiled else model.forward)(input_ids=chunk, cache=cache).logits
                expected = model(input_ids=chunk, cache=eager_cache).logits
                torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
                position += length
                self.assertEqual(cache.get_seq_length(), eager_cache.get_seq_length())
        for layer, eager_layer in zip(cache.layers, eager_cache.layers):
            self.assertEqual(layer.get_seq_length(), eager_layer.get_seq_length())
            self.assertEqual(int(layer.cumulative_length), int(eager_layer.cumulative_length))

    def test_mask_sizes_are_ints_once_the_length_is_read_back(self):
        # After compiled decoding steps past the window, a layer whose length was read back gives the mask sizes of a
        # cache that was never compiled, as Python ints (not a 0-d tensor offset)
        model = _model("mistral", 4)
        input_ids = torch.randint(3, 99, (1, 12), generator=torch.Generator().manual_seed(0))
        step = torch.compile(model.forward, backend="eager", fullgraph=True, dynamic=False)
        cache, eager_cache = (StaticCache(config=model.config, max_cache_len=16) for _ in range(2))
        with torch.no_grad():
            model(input_ids=input_ids[:, :8], cache=cache)
            model(input_ids=input_ids[:, :8], cache=eager_cache)
            for position in range(8, 12):
                step(input_ids=input_ids[:, position : position + 1], cache=cache)
                model(input_ids=input_ids[:, position : position + 1], cache=eager_cache)
        for layer, eager_layer in zip(cache.layers, eager_cache.layers):
            self.assertEqual(layer.get_seq_length(), eager_layer.get_seq_length())
            for query_length in (1, 3):
                sizes = layer.get_mask_sizes(query_length)
                self.assertEqual([type(size) for size in sizes], [int, int])
                self.assertEqual(sizes, eager_layer.get_mask_sizes(query_length))

    @parameterized.expand([("greedy",), ("prompt_lookup",)])
    def test_passed_cache_used_again_by_a_second_compiled_call(self, decoding):
        # A chat's second turn on the same cache, the window not full: the layers left on the device by the first call
        model = _model("mistral", 32)
        kwargs = {"max_new_tokens": 6, "do_sample": False} | GENERATE_KWARGS
        if decoding == "prompt_lookup":
            kwargs["prompt_lookup_num_tokens"] = 3
        outputs = []
        for compile_config in (None, _compile_config()):
            cache = StaticCache(config=model.config, max_cache_len=64)
            first = model.generate(
                torch.tensor(PROMPTS["repeating"]), cache=cache, compile_config=compile_config, **kwargs
            )
            input_ids = torch.cat([first.sequences, torch.tensor([[9, 10, 11]])], dim=-1)
            second = model.generate(input_ids, cache=cache, compile_config=compile_config, **kwargs)
            outputs.append((first, second))
        for compiled, eager in zip(outputs[1], outputs[0]):
            SpeculativeStaticCacheTest.assert_same_outputs(self, compiled, eager)
