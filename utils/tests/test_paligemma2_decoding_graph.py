"""PaliGemma 2 (patch 10) with the rest of the series: decoding past its sliding window with generate's compiled forward
is one graph (patch 19), with the dynamic cache's tokens."""

import unittest

import torch

from transformers import (
    CompileConfig,
    Gemma2Config,
    PaliGemmaConfig,
    PaliGemmaForConditionalGeneration,
    SiglipVisionConfig,
)


class _Graphs:
    def __init__(self):
        self.inputs = []

    def __deepcopy__(self, memo):
        return self

    def __call__(self, graph_module, example_inputs):
        self.inputs.append(example_inputs)
        return graph_module.forward


class PaliGemma2DecodingGraphTest(unittest.TestCase):
    def test_one_decoding_graph_past_the_window(self):
        torch._dynamo.reset()
        torch.manual_seed(0)
        text = Gemma2Config(
            num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            head_dim=8, vocab_size=99, pad_token_id=0, sliding_window=4,
        )  # fmt: skip
        vision = SiglipVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            image_size=8,
            patch_size=2,
        )
        config = PaliGemmaConfig(text_config=text, vision_config=vision, image_token_index=98, projection_dim=32)
        model = PaliGemmaForConditionalGeneration(config).eval()
        input_ids = torch.cat([torch.full((1, 16), 98), torch.randint(3, 90, (1, 5))], dim=1)
        inputs = {
            "input_ids": input_ids,
            "pixel_values": torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1)),
            "token_type_ids": torch.zeros_like(input_ids),
        }
        expected = model.generate(**inputs, max_new_tokens=12, do_sample=False)
        for dynamic in (False, None):
            graphs = _Graphs()
            compile_config = CompileConfig(backend=graphs, mode=None, dynamic=dynamic)
            compile_config._compile_all_devices = True
            output = model.generate(
                **inputs,
                max_new_tokens=12,
                do_sample=False,
                cache_implementation="static",
                compile_config=compile_config,
            )
            self.assertTrue(torch.equal(output, expected))
            # the 11 decoding steps, all past the window of 4: one graph, which takes no `SymInt`
            self.assertEqual(len(graphs.inputs), 1, dynamic)
            self.assertFalse(any(isinstance(x, torch.SymInt) for x in graphs.inputs[0]))
            torch._dynamo.reset()
