"""Guards of `generate`'s stopping around the length-limit skip (patch 17), kept in the fork's suite: the list's result
for 2-D and 3-D `input_ids`, eos stopping and padding, a streamer, the warning past `max_position_embeddings`, and
`DeferredStopCheck` forced on CPU. Each holds on pristine 5.25.0 too."""

import contextlib
import unittest
from unittest import mock

import torch
from parameterized import parameterized

from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.generation.stopping_criteria import MaxLengthCriteria, StoppingCriteria, StoppingCriteriaList
from transformers.generation.utils import DeferredStopCheck
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging


PROMPT, NEW = 6, 7


class NeverStop(StoppingCriteria):
    def __call__(self, input_ids, scores, **kwargs):
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


class HostEvent:
    """A device event stand-in, so that the deferred check also runs on CPU."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self):
        pass

    def synchronize(self):
        pass


@contextlib.contextmanager
def forced_deferred_stop_check():
    """`generate` with `DeferredStopCheck` on CPU (upstream uses it on MPS only): yields the mock of its `finish`."""
    with (
        mock.patch.object(DeferredStopCheck, "is_supported", return_value=True),
        mock.patch("torch.Event", HostEvent),
        mock.patch.object(DeferredStopCheck, "finish", autospec=True, side_effect=DeferredStopCheck.finish) as finish,
    ):
        yield finish


def _tiny_model(name, max_positions=64):
    torch.manual_seed(0)
    common = {"vocab_size": 99, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": None}
    if name == "gpt2":
        config = GPT2Config(n_layer=1, n_embd=32, n_head=4, n_positions=max_positions, **common)
        return GPT2LMHeadModel(config).eval()
    config = LlamaConfig(
        num_hidden_layers=1, hidden_size=32, intermediate_size=37, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=max_positions, **common,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def _inputs(batch_size=2):
    input_ids = torch.randint(3, 99, (batch_size, PROMPT), generator=torch.Generator().manual_seed(0))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :2] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


class StoppingGuardsTest(unittest.TestCase):
    def _generate(self, model, **kwargs):
        kwargs = {
            "do_sample": False,
            "max_new_tokens": NEW,
            "return_dict_in_generate": True,
            "output_scores": True,
        } | kwargs
        return model.generate(**_inputs(), **kwargs)

    @parameterized.expand([("2d", ()), ("3d_codebooks", (3,))])
    def test_result_unchanged(self, _, trailing_shape):
        # Guard: values, dtype and device as before, with the length read from `input_ids.shape[1]`
        for length, expected in ((4, [False, False]), (5, [True, True])):
            input_ids = torch.full((2, length, *trailing_shape), 5)
            for criteria in ([MaxLengthCriteria(5)], [MaxLengthCriteria(5), NeverStop()], []):
                is_done = StoppingCriteriaList(criteria)(input_ids, None)
                self.assertEqual(is_done.tolist(), expected if criteria else [False, False])
                self.assertEqual((is_done.dtype, is_done.device), (torch.bool, input_ids.device))

    def test_eos_still_stops_and_pads(self):
        # Guard
        model = _tiny_model("gpt2")
        reference = self._generate(model).sequences
        eos = reference[0, PROMPT + 2].item()  # the third new token of the first sequence
        first_eos = (reference[0, PROMPT:] == eos).nonzero()[0].item()
        out = self._generate(model, eos_token_id=eos).sequences
        torch.testing.assert_close(out[0, : PROMPT + first_eos + 1], reference[0, : PROMPT + first_eos + 1])
        self.assertTrue((out[0, PROMPT + first_eos + 1 :] == model.config.pad_token_id).all())

    def test_streamer_gets_every_token(self):
        # Guard
        class Recorder:
            def __init__(self):
                self.values = []

            def put(self, value):
                self.values.append(value)

            def end(self):
                pass

        model = _tiny_model("gpt2")
        streamer = Recorder()
        inputs = _inputs(batch_size=1)
        sequences = model.generate(**inputs, do_sample=False, max_new_tokens=NEW, streamer=streamer)
        self.assertEqual(len(streamer.values), 1 + NEW)
        torch.testing.assert_close(torch.cat([v.reshape(1, -1) for v in streamer.values], dim=-1), sequences)

    def test_warns_past_max_position_embeddings(self):
        # Guard: the length limit still runs, and warns, once generation goes past the model's positions
        model = _tiny_model("llama", max_positions=PROMPT + 2)
        logger = logging.get_logger("transformers.generation.stopping_criteria")
        logging.warning_once.cache_clear()
        with CaptureLogger(logger) as captured:
            self._generate(model)
        self.assertIn(f"exceeded the model's predefined maximum length ({PROMPT + 2})", captured.out)

    def test_deferred_stop_check(self):
        # Guard: the deferred check reads the stop flag one step late, whether the criteria could stop or not
        model = _tiny_model("gpt2")
        eos = self._generate(model).sequences[0, PROMPT + 2].item()
        for eos_token_id in (None, eos):
            expected = self._generate(model, eos_token_id=eos_token_id)
            with forced_deferred_stop_check() as finish:
                out = self._generate(model, eos_token_id=eos_token_id)
            self.assertEqual(finish.call_count, 1)
            torch.testing.assert_close(out.sequences, expected.sequences, rtol=0, atol=0)
            torch.testing.assert_close(torch.stack(out.scores), torch.stack(expected.scores), rtol=0, atol=0)
