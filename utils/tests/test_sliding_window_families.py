"""Every model family with a sliding window or chunked layer decodes past its window with one compiled graph.

The matrix behind the focused tests of the static sliding window patch: each family of the
causal-LM mapping whose tiny model, with its window shrunk to 4 tokens, has a static sliding window layer, generates 12
tokens (three windows) with a static cache and its forward compiled by a counting backend (`oracle.sliding`, on the
fork).
"""

import pytest
from oracle.sliding import run_family, sliding_families


FAMILIES = [
    "afmoe", "beam", "cohere2", "cohere2_moe", "cwm", "doge", "dory", "dots3_note_text", "ergo", "exaone4",
    "exaone_moe", "flint", "gemma2", "gemma3", "gemma3_text", "gemma3n_text", "gemma4", "gemma4_text",
    "gemma4_unified", "gemma4_unified_text", "got_ocr2", "gpt_oss", "granite_swa", "granitemoe_swa",
    "inkling2_loop_text", "inkling2_text", "inkling_text", "kolibri1", "kolibri1_1", "lara_mini", "lfm3", "llama4",
    "llama4_text", "mimo_v2_flash", "ministral", "ministral3", "mistral", "mixtral", "modernbert-decoder", "moshi",
    "moss_transcribe_diarize", "olmo3", "phi3", "phi4_multimodal", "phimoe", "qwen2", "qwen3", "qwen3_moe",
    "recurrent_gemma", "starcoder2", "vaultgemma",
]  # fmt: skip
# Families whose static cache gives other tokens than their dynamic cache on pristine 5.25.0 as well (DOTS3 Note's
# indexed layers; Moshi's depth decoder): their compiled runs are compared with their eager static run instead
STATIC_DIFFERS_ON_PRISTINE = {"dots3_note_text", "moshi"}
# Families whose forward breaks the graph in its own code on pristine as well (Kolibri 1.1's sparse indexer groups its
# queries with `unique().tolist()`; Dory copies its recurrent cache layers with `copy.deepcopy` at the prefill): more
# graphs per call, none compiled again in a second call
MODEL_GRAPH_BREAKS = {"dory", "kolibri1_1"}
SCORES_ATOL = 1e-5


def test_the_list_is_every_family():
    assert sliding_families() == FAMILIES


def _assert_same_generation(run, reference, exact_scores=False):
    assert run["sequences"].tolist() == reference["sequences"].tolist()
    delta = (run["scores"] - reference["scores"]).abs().nan_to_num(posinf=0.0).max().item()
    assert delta <= (0.0 if exact_scores else SCORES_ATOL)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_one_decoding_graph_past_the_window(model_type):
    entry = run_family(model_type)
    assert "build" not in entry, entry.get("build")
    reference = entry["static"] if model_type in STATIC_DIFFERS_ON_PRISTINE else entry["dynamic"]
    _assert_same_generation(entry["static"], reference)

    # `dynamic=False`: the prefill and one decoding step, and nothing more in a second call of the same shapes
    static_shapes = entry["static_shapes"]
    graphs = static_shapes["graphs"][0] if model_type in MODEL_GRAPH_BREAKS else 2
    assert static_shapes["graphs"] == [graphs, graphs]
    for run in static_shapes["runs"]:
        _assert_same_generation(run, reference)
    # `dynamic=None` (torch.compile's default): the same graphs, without symbolic sizes
    default = entry["default"]
    assert default["graphs"] == [graphs]
    assert default["symint_inputs"] == [0] * graphs
    _assert_same_generation(default["runs"][0], reference)
