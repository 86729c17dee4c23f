"""`python -m bench.stance_guards`: the guards of the fork's compiled decoding step, all of them and those the steps
after the first one still evaluate under `torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)`.

Per tiny model (the benchmark's Llama with 2 and with 16 layers), one greedy `generate` with
`compile_decoding_step=True` (a static cache, the step compiled by generate's `CompileConfig()`), then the compiled
step's cache entry: its guard tree (`root`) and the tree the stance evaluates (`diff_guard_root`: torch keeps every
tensor's guards and those that failed before, `collect_diff_guard_sources` in `torch/_dynamo/guards.py`), counted
by kind. Prints one line per model. Uses dynamo's debugging helpers (`_get_cache_entries_for_region`), as a
measure only; the fork does not.
"""

from __future__ import annotations

import sys
from collections import Counter


MODELS = ("llama", "llama16")


def leaf_guards(manager) -> Counter:
    """The leaf guards of a guard manager and of its children, by kind."""
    found = Counter(type(leaf).__name__ for leaf in manager.get_leaf_guards())
    for child in manager.get_child_managers():
        found += leaf_guards(child)
    return found


def count(name: str) -> dict:
    import torch
    from torch._dynamo.eval_frame import _get_cache_entries_for_region

    from transformers import CompileConfig
    from transformers.generation import decoding_step

    from .scenarios import generation_config, model_inputs, tiny_model

    torch._dynamo.reset()
    model = tiny_model(name, "cpu")
    config = generation_config(8, static_cache=True, generate_compiles=True)
    config.compile_config = CompileConfig()
    config.compile_config._compile_all_devices = True
    config.compile_decoding_step = True
    model.generate(**model_inputs(name, "cpu"), generation_config=config)
    region = model._compiled_decoding_step._isolate_recompiles_id
    (entry,) = _get_cache_entries_for_region(decoding_step._decoding_step, region)
    every, kept = leaf_guards(entry.guard_manager.root), leaf_guards(entry.guard_manager.diff_guard_root)
    return {"layers": model.config.num_hidden_layers, "guards": sum(every.values()), "kept": kept}


def main() -> int:
    import torch

    torch.set_num_threads(1)
    for name in MODELS:
        found = count(name)
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(found["kept"].items()))
        print(
            f"{name}: {found['layers']} layers, {found['guards']} guards, {sum(found['kept'].values())} evaluated "
            f"under the stance ({kinds})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
