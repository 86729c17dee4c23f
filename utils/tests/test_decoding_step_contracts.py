"""The compiled decoding step (patch 24) as a user meets it: a tiny Llama (2 layers, hidden 32, vocab 128), the default
`CompileConfig()` (inductor), on CPU, `compile_decoding_step=True` as the one option asked for. Each case is one the step
must give the regular loop's result for, through the public API:

- another thread's compiled function, called while the step runs, evaluates its guards (nothing process-wide);
- a user's subclass of a processor the step runs, overriding `__call__`, runs its own `__call__`;
- a forward hook with a state of its own runs at every step;
- calls with one passed cache give the compiled step the same static addresses, greedy and sampling;
- `min_p` sampling runs in the step, with the tokens and scores of the regular loop with a compiled forward.
"""

import threading
import unittest
from unittest import mock

import torch

from transformers import (
    CompileConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LogitsProcessorList,
    StaticCache,
    TopKLogitsWarper,
)
from transformers.generation import decoding_step
from transformers.generation import utils as generation_utils
from transformers.generation.decoding_step import DecodingStep


PROMPT, NEW_TOKENS = 6, 12
SAMPLING = {"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.1}


def _model():
    torch.manual_seed(0)
    config = LlamaConfig(
        num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=128, pad_token_id=0,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def _generate(model, step, compiled_forward=False, **kwargs):
    """Greedy (unless told otherwise) `generate` with a static cache; the regular loop's forward compiled on CPU too
    where `compiled_forward`, as the step compiles its own."""
    input_ids = torch.randint(3, 128, (1, PROMPT), generator=torch.Generator().manual_seed(0))
    if "cache" not in kwargs:
        kwargs["cache_implementation"] = "static"
    if compiled_forward:
        kwargs["compile_config"] = CompileConfig()
        kwargs["compile_config"]._compile_all_devices = True
    torch.manual_seed(1)
    return model.generate(
        input_ids, max_new_tokens=NEW_TOKENS, eos_token_id=None, compile_decoding_step=step, output_scores=True,
        return_dict_in_generate=True, **kwargs,
    )  # fmt: skip


class DecodingStepContractsTest(unittest.TestCase):
    def setUp(self):
        torch._dynamo.reset()

    def assertSameOutputs(self, output, expected):
        self.assertTrue(torch.equal(output.sequences, expected.sequences))
        torch.testing.assert_close(torch.stack(output.scores), torch.stack(expected.scores), rtol=0, atol=0)

    def _step_runs(self, model, **kwargs):
        """`_generate` with the step, which must run every decoding step (the regular loop runs where `run` gives
        `None`)."""
        run, ran = DecodingStep.run, []
        with mock.patch.object(
            DecodingStep, "run", autospec=True, side_effect=lambda *a: ran.append(run(*a)) or ran[-1]
        ):
            output = _generate(model, True, **kwargs)
        self.assertEqual(len(ran), 1)
        self.assertIsNotNone(ran[0])
        return output

    def test_another_threads_compiled_function_evaluates_its_guards(self):
        # `f` compiled with `factor = 1`, then `factor = 3`: a call in another thread, while the step runs its fifth
        # step, compiles again and gives 3 (v6 skipped the guards of every compiled function in the process there)
        factor = [1]

        @torch.compile(backend="eager")
        def f(x):
            return x * factor[0]

        x = torch.ones(2)
        f(x)
        factor[0] = 3
        results, go, done = [], threading.Event(), threading.Event()

        def other_thread():
            go.wait()
            results.append(f(x).tolist())
            done.set()

        thread = threading.Thread(target=other_thread)
        thread.start()
        stop_check, steps = generation_utils.StopCheck.__call__, []

        def fifth_step_waits(self, *args):
            steps.append(1)
            if len(steps) == 5:
                go.set()
                done.wait(timeout=60)
            return stop_check(self, *args)

        with mock.patch.object(generation_utils.StopCheck, "__call__", fifth_step_waits):
            self._step_runs(_model())
        thread.join(timeout=60)
        self.assertEqual(results, [[3.0, 3.0]])

    def test_subclass_overriding_a_declared_processor(self):
        model = _model()
        greedy = _generate(model, False).sequences[0, PROMPT:].tolist()

        class BanTokens(TopKLogitsWarper):
            # Bans every token of the greedy run: the step form of `TopKLogitsWarper` would keep them
            def __call__(self, input_ids, scores):
                return super().__call__(input_ids, scores).index_fill(1, torch.tensor(greedy), -float("inf"))

        processors = LogitsProcessorList([BanTokens(50)])
        expected = _generate(model, False, logits_processor=processors)
        output = _generate(model, True, logits_processor=processors)
        self.assertSameOutputs(output, expected)
        self.assertFalse(set(output.sequences[0, PROMPT:].tolist()) & set(greedy))

    def test_forward_hook_with_a_state(self):
        model = _model()
        forwards = []
        model.lm_head.register_forward_hook(
            lambda module, args, output: forwards.append(1) or output + 0.1 * len(forwards)
        )
        expected = _generate(model, False)
        forwards.clear()
        output = _generate(model, True)
        self.assertSameOutputs(output, expected)

    def test_passed_cache_keeps_the_static_addresses(self):
        # Over 3 calls with one passed cache, the tensors marked as static addresses are those of the first call (with
        # CUDA graphs: no new recording), greedy and sampling (v6 marked 13 and 20 new ones at calls 2 and 3)
        model = _model()
        for kwargs in ({}, SAMPLING):
            cache = StaticCache(config=model.config, max_cache_len=32)
            marked, mark = [], torch._dynamo.mark_static_address

            def record(tensor, *args, **kw):
                marked[-1].add(tensor.data_ptr())
                return mark(tensor, *args, **kw)

            with mock.patch.object(torch._dynamo, "mark_static_address", record):
                for _ in range(3):
                    marked.append(set())
                    cache.reset()
                    self._step_runs(model, cache=cache, **kwargs)
            self.assertEqual([marked[1] - marked[0], marked[2] - marked[0]], [set(), set()])

    def test_min_p_sampling_in_the_step(self):
        model = _model()
        expected = _generate(model, False, compiled_forward=True, **SAMPLING)
        output = self._step_runs(model, **SAMPLING)
        self.assertSameOutputs(output, expected)

    def test_configurations_past_the_limit_run_the_regular_loop(self):
        # A model keeps the compiled functions of `_MAX_CONFIGURATIONS` configurations for its life (dynamo keeps the
        # graphs of dropped ones): a call in another one runs the regular loop after a warning, and those it keeps run
        model = _model()
        with mock.patch.object(decoding_step, "_MAX_CONFIGURATIONS", 1):
            self._step_runs(model)
            with self.assertLogs("transformers.generation.decoding_step", level="WARNING") as logs:
                output = _generate(model, True, **SAMPLING)
            self.assertIn("compiled the step for 1 configurations", "\n".join(logs.output))
            expected = _generate(model, False, **SAMPLING)
            self.assertTrue(torch.equal(output.sequences, expected.sequences))
            torch.testing.assert_close(torch.stack(output.scores), torch.stack(expected.scores), rtol=1e-5, atol=1e-5)
            self._step_runs(model)
