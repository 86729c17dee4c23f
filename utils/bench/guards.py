"""`make bench-guards`: what dynamo's guard evaluation costs per token, pristine beside the fork.

In one process per tree and round, times `generate` with a `StaticCache` passed in (its length fixed, so that each
compiled function has one graph) and generate's own compile (`CompileConfig()`, and on the fork
`CompileConfig(decoding_step=True)` too), on the benchmark's tiny models, greedy, one torch thread: each call once as
it runs and once under `torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)`, after warm-up calls that
compile every graph both need. A token's time is the difference between a call of `NEW_TOKENS` tokens and one of
`FEW_TOKENS`, divided by the tokens between them, in thread CPU time (a descheduled process accrues none); each
figure is the least over the calls and rounds, the rounds alternating the trees. What the guards cost per token is
the difference between the two columns. Both give the same tokens (checked: the stance may run a graph compiled for
other inputs, which is why it is unsafe and only ever an opt-in). Writes the table and the raw figures into
`bench-out/guards-<timestamp>/`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from forktool.common import ROOT

from .trees import pristine_tree, run_rounds, write_results


NEW_TOKENS, FEW_TOKENS = 64, 8
PATHS = ("compile_config", "decoding_step")


def worker(models: list[str], calls: int) -> dict:
    """In the tree on `PYTHONPATH`: per model and path, the least thread CPU time per token (us), with the guards
    evaluated and skipped."""
    import torch

    from transformers import CompileConfig, StaticCache

    from . import scenarios

    torch.set_num_threads(1)
    has_step = "decoding_step" in getattr(CompileConfig, "__dataclass_fields__", {})
    found = {}
    for name in models:
        model = scenarios.tiny_model(name, "cpu")
        input_ids, mask = scenarios.prompt("cpu")
        cache = StaticCache(config=model.config, max_cache_len=input_ids.shape[1] + NEW_TOKENS)
        for path in PATHS if has_step else PATHS[:1]:
            compile_config = CompileConfig(decoding_step=True) if path == "decoding_step" else CompileConfig()
            compile_config._compile_all_devices = True  # generate compiles on CUDA-like devices only otherwise

            def run(new_tokens, compile_config=compile_config):
                config = scenarios.generation_config(new_tokens, static_cache=False, generate_compiles=True)
                config.compile_config = compile_config
                cache.reset()
                start = time.thread_time()
                out = model.generate(input_ids, attention_mask=mask, generation_config=config, cache=cache)
                return time.thread_time() - start, out

            for new_tokens in (NEW_TOKENS, FEW_TOKENS) * 2:  # warm-up: every graph compiled, without the stance
                run(new_tokens)
            per_token = {"guards": [], "skipped": []}
            for _ in range(calls):
                times, outputs = {}, {}
                for key in per_token:
                    for new_tokens in (NEW_TOKENS, FEW_TOKENS):
                        if key == "skipped":
                            with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
                                times[key, new_tokens], outputs[key, new_tokens] = run(new_tokens)
                        else:
                            times[key, new_tokens], outputs[key, new_tokens] = run(new_tokens)
                    per_token[key].append(
                        1e6 * (times[key, NEW_TOKENS] - times[key, FEW_TOKENS]) / (NEW_TOKENS - FEW_TOKENS)
                    )
                if not torch.equal(outputs["guards", NEW_TOKENS], outputs["skipped", NEW_TOKENS]):
                    raise RuntimeError(f"{name} {path}: other tokens with the guards skipped")
            found[f"{name} {path}"] = {key: min(values) for key, values in per_token.items()}
    return found


def table(trees: list[str], results: dict[str, list[dict]]) -> str:
    """Per tree and entry: the least us per token with the guards and with them skipped, over the rounds, and the
    difference."""
    keys = list(dict.fromkeys(key for tree in trees for run in results[tree] for key in run))
    lines = [
        "| tree | entry | us per token | guards skipped | saved by skipping the guards |",
        "|---|---|---|---|---|",
    ]
    for tree in trees:
        for key in keys:
            if key not in results[tree][0]:
                continue
            guards, skipped = (min(run[key][side] for run in results[tree]) for side in ("guards", "skipped"))
            lines.append(f"| {tree} | {key} | {guards:.0f} | {skipped:.0f} | {guards - skipped:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guards", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--models", default="gpt2,llama,gemma2")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models = args.models.split(",")
    if args.worker:
        args.json.write_text(json.dumps(worker(models, args.calls)), encoding="utf-8")
        return 0
    out = ROOT / "bench-out" / f"guards-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True)
    sources = {"pristine": pristine_tree() / "src", "fork": ROOT / "src"}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        worker_args = ["--models", args.models, "--calls", str(args.calls)]
        results = run_rounds("bench.guards", sources, args.rounds, out, Path(tmp), worker_args)
    load = os.getloadavg()[0]
    text = (
        f"thread CPU us per token ({NEW_TOKENS} new tokens against {FEW_TOKENS}, least over {args.calls} calls x "
        f"{args.rounds} rounds), greedy, a StaticCache passed in, {os.cpu_count()} CPU cores, load average "
        f"{load:.1f} at the end, {time.perf_counter() - start:.0f} s\n\n{table(list(sources), results)}\n"
    )
    write_results(out, text, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
