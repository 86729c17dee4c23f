"""The sliding window and chunked families, past their window with a compiled forward, on one tree:
`python -m oracle.sliding --tree NAME --out PATH [--only a,b]`.

Every model type of the causal-LM auto mapping whose tiny config (see `oracle.matrix`), with its window shrunk to
`WINDOW` tokens, gives a `StaticCache` holding a static sliding window layer: greedy `generate` of `NEW_TOKENS` (three
times the window) for batch 2 with the first row left padded, with a dynamic cache (the reference) and a static one in
eager mode, then with the instance's forward compiled by a counting backend (no inductor): with `dynamic=False`, two
calls, the graphs each call compiled and the recompiles' reasons; with `dynamic=None`, the `SymInt` inputs of each
graph. Each compiled run also records how many distinct mask tensors each layer type got over the decoding steps.

`oracle` runs it on both trees and reports recompiles per architecture beside the tokens; the fork's suite
(`utils/tests/test_sliding_window_families.py`) asserts the fork's properties from the same runs.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import time
from pathlib import Path

import torch

import transformers
import transformers.cache_utils as cache_utils
from oracle.matrix import Timeout, _alarm, build_model, declared_fields, err, make_inputs, text_config_of
from transformers import StaticCache
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


WINDOW = 4
NEW_TOKENS = 3 * WINDOW
MAX_CACHE_LENGTH = 24
PER_MODEL_TIMEOUT = 300  # s
# Set on the text config where its class declares them: the window of sliding layers (under its several names),
# the chunks of chunked layers, and the switches of models whose sliding layers are optional
WINDOW_OVERRIDES = {
    "sliding_window": WINDOW,
    "sliding_window_size": WINDOW,
    "attention_window_size": WINDOW,
    "attention_chunk_size": WINDOW,
    "use_sliding_window": True,
    "max_window_layers": 0,
}


def windowed_model(model_type: str, entry: dict):
    """The tiny model of `model_type` with its windows shrunk, or None (`entry["build"]` says why)."""
    overrides = dict(WINDOW_OVERRIDES)
    text_config_class = type(text_config_of(CONFIG_MAPPING[model_type]()))
    if "use_sliding_window" in declared_fields(text_config_class):
        # The layer types follow the switch (and `max_window_layers`) when they are not given
        overrides["layer_types"] = None
    return build_model(model_type, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type], entry, overrides)


def has_sliding_layers(model) -> bool:
    """Whether the static cache of `model` holds a static sliding window (or chunked) layer."""
    cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE_LENGTH)
    return any(isinstance(layer, cache_utils.StaticSlidingWindowLayer) for layer in cache.layers)


def generate(model, **kwargs) -> dict:
    input_ids, attention_mask = make_inputs()
    input_ids = input_ids[:, 1:]  # 5 tokens, the first row left padded by one
    attention_mask = attention_mask[:, 1:]
    out = model.generate(
        input_ids, attention_mask=attention_mask, max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
        eos_token_id=None, pad_token_id=0, output_scores=True, return_dict_in_generate=True, **kwargs,
    )  # fmt: skip
    return {"sequences": out.sequences.detach(), "scores": torch.stack([s.detach().float() for s in out.scores])}


def compiled_runs(model, dynamic, calls: int) -> dict:
    """`calls` static-cache `generate` calls with the instance's forward compiled by a counting backend."""
    example_inputs, mask_tensors = [], []

    def backend(graph_module, inputs):
        example_inputs.append(inputs)
        return graph_module.forward

    torch._dynamo.reset()
    compiled = torch.compile(type(model).forward.__get__(model), backend=backend, dynamic=dynamic)

    @functools.wraps(type(model).forward.__get__(model))
    def forward(*args, **kwargs):
        input_ids = kwargs.get("input_ids")
        if input_ids is not None and input_ids.shape[1] == 1:
            masks = kwargs.get("attention_mask")
            masks = masks if isinstance(masks, dict) else {"all": masks}
            mask_tensors.append({key: id(mask) if mask is not None else None for key, mask in masks.items()})
        return compiled(*args, **kwargs)

    model.forward = forward
    graphs, runs = [], []
    try:
        for _ in range(calls):
            mask_tensors.clear()
            runs.append(generate(model, cache_implementation="static", max_cache_len=MAX_CACHE_LENGTH))
            graphs.append(len(example_inputs))
            runs[-1]["mask_tensors"] = {key: len({step[key] for step in mask_tensors}) for key in mask_tensors[0]}
    finally:
        del model.forward
    return {
        "graphs": graphs,
        "symint_inputs": [sum(isinstance(value, torch.SymInt) for value in inputs) for inputs in example_inputs],
        "runs": runs,
    }


def run_family(model_type: str) -> dict:
    entry = {"class": MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]}
    model = windowed_model(model_type, entry)
    if model is None:
        return entry
    entry["layer_types"] = getattr(text_config_of(model.config), "layer_types", None)
    entry["layers"] = sorted({type(layer).__name__ for layer in StaticCache(model.config, MAX_CACHE_LENGTH).layers})
    for name, kwargs in (("dynamic", {}), ("static", {"cache_implementation": "static", "max_cache_len": 24})):
        try:
            with torch.no_grad():
                entry[name] = generate(model, **kwargs)
        except Exception as e:  # noqa: BLE001
            entry[name] = err(e)
    for name, dynamic, calls in (("static_shapes", False, 2), ("default", None, 1)):
        try:
            with torch.no_grad():
                entry[name] = compiled_runs(model, dynamic, calls)
        except Exception as e:  # noqa: BLE001
            entry[name] = err(e)
    return entry


def sliding_families(only: list[str] | None = None) -> list[str]:
    """The model types (of `only`, or all) whose windowed tiny model has a static sliding window or chunked layer."""
    found = []
    for model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        if only is not None and model_type not in only:
            continue
        entry = {}
        try:
            with torch.device("meta"):
                model = windowed_model(model_type, entry)
            if model is not None and has_sliding_layers(model):
                found.append(model_type)
        except Exception:  # noqa: BLE001  (a config that does not build is not a family of this matrix)
            continue
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m oracle.sliding", description=__doc__.splitlines()[0])
    parser.add_argument("--tree", required=True, help="the tree's name in the report")
    parser.add_argument("--out", required=True, type=Path, help="where to save the results (torch.save)")
    parser.add_argument("--only", default=None, help="comma-separated model types (default: every such family)")
    args = parser.parse_args(argv)
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    families = sliding_families(args.only.split(",") if args.only else None)
    results = {"tree": args.tree, "transformers_file": transformers.__file__, "models": {}}
    signal.signal(signal.SIGALRM, _alarm)
    start = time.perf_counter()
    for i, model_type in enumerate(families):
        t0 = time.perf_counter()
        signal.alarm(PER_MODEL_TIMEOUT)
        try:
            entry = run_family(model_type)
        except Timeout as e:
            entry = {"build": err(e)}
        finally:
            signal.alarm(0)
        results["models"][model_type] = entry
        graphs = entry.get("static_shapes", {}).get("graphs")
        print(f"{i + 1}/{len(families)} {model_type} ({time.perf_counter() - t0:.1f}s) graphs={graphs}", flush=True)
    results["total_seconds"] = round(time.perf_counter() - start, 1)
    torch.save(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
