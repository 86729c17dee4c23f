"""`python -m bench.gpu_check` (`make bench-gpu`): the decoding step on a GPU, pristine beside the fork, in one script.

For each tree (each in its own process, the trees alternating as in `make bench`) and tiny model, greedy `generate`
with a static cache passed in, along three paths: generate's own compile (`CompileConfig()`, `mode="reduce-overhead"`),
the docs' recipe (`model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)`) and, on the
fork, the compiled decoding step (`compile_decoding_step=True`). Per path it reports the time per token (the least
difference between a long and a short call, each the least over `--calls` calls, so that the prefill and the first
step cancel out), the CUDA-graph recordings, replays and runs outside a graph of cudagraph trees per token (counted by wrapping
their tree manager's methods), cudagraph skips, and the synchronizations per decoding step that
`torch.cuda.set_sync_debug_mode("warn")` reports; then the CUDA-graph recordings of each of `CONSECUTIVE_CALLS` consecutive
calls with the cache passed in (reset before each, as a caller keeps one to keep its addresses) and with
`cache_implementation="static"` (a new cache at every call, upstream's way). `--device cpu` runs the same code with no device calls (no
recordings, no sync mode), which `utils/tests/test_bench.py` runs. Writes `results.json` and `table.md` into
`bench-out/gpu-<timestamp>/` (or `--out`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

from forktool.common import ROOT

from .trees import fork_tree, pristine_tree, run_rounds


PATHS = ("compile_config", "recipe", "decoding_step")
MODELS = ("llama", "gemma2")
LONG, SHORT = 48, 16  # new tokens of the long and the short call: their difference is what a token costs
CONSECUTIVE_CALLS = 5


class CudaGraphCounts:
    """Counts what cudagraph trees do, by wrapping the methods of their tree manager (`torch/_inductor/
    cudagraph_trees.py`): a recording, a replay of a recorded graph, a run outside a graph (warm-up or fallback)."""

    METHODS = {"record_function": "recordings", "execute_node": "replays", "run_eager": "runs outside a graph"}

    def __init__(self):
        self.counts = dict.fromkeys(self.METHODS.values(), 0)
        self._originals = {}

    def __enter__(self):
        from torch._inductor import cudagraph_trees

        manager = cudagraph_trees.CUDAGraphTreeManager
        for method, name in self.METHODS.items():
            original = getattr(manager, method)
            self._originals[method] = original

            def counted(*args, __original=original, __name=name, **kwargs):
                self.counts[__name] += 1
                return __original(*args, **kwargs)

            setattr(manager, method, counted)
        return self

    def __exit__(self, *exc):
        from torch._inductor import cudagraph_trees

        for method, original in self._originals.items():
            setattr(cudagraph_trees.CUDAGraphTreeManager, method, original)


def _syncs(device: str, call) -> int | None:
    """The synchronizations `torch.cuda.set_sync_debug_mode("warn")` reports during `call()` (None off CUDA)."""
    if device != "cuda":
        call()
        return None
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return sum("synchroniz" in str(warning.message) for warning in caught)


def worker(device: str, models: list[str], calls: int) -> dict:
    """In the tree on `PYTHONPATH`: per model and path, the figures of the module docstring."""
    import torch

    from transformers import CompileConfig, GenerationConfig, StaticCache

    from . import scenarios

    has_step = hasattr(GenerationConfig(), "compile_decoding_step")
    found = {}
    for name in models:
        for path in PATHS if has_step else PATHS[:2]:
            torch._dynamo.reset()
            model = scenarios.tiny_model(name, device)
            input_ids, mask = scenarios.prompt(device)
            cache = StaticCache(config=model.config, max_cache_len=input_ids.shape[1] + LONG)
            config = scenarios.generation_config(LONG, static_cache=False, generate_compiles=path != "recipe")
            if path == "recipe":
                model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
            else:
                config.compile_config = CompileConfig()
                config.compile_config._compile_all_devices = True  # generate compiles on CUDA-like devices only
                config.compile_decoding_step = path == "decoding_step"

            def run(new_tokens: int) -> float:
                config.max_new_tokens = new_tokens
                cache.reset()
                if device == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                model.generate(input_ids, attention_mask=mask, generation_config=config, cache=cache)
                if device == "cuda":
                    torch.cuda.synchronize()
                return time.perf_counter() - start

            for new_tokens in (LONG, SHORT, LONG):  # compile, record, warm up
                run(new_tokens)
            # each length at its fastest over the calls: a stall only ever adds time to one of them
            long_s, short_s = min(run(LONG) for _ in range(calls)), min(run(SHORT) for _ in range(calls))
            per_token = (long_s - short_s) / (LONG - SHORT)
            counts = {}
            for new_tokens in (LONG, SHORT):
                with CudaGraphCounts() as counted:
                    run(new_tokens)
                counts[new_tokens] = counted.counts
            steps = LONG - SHORT
            skips_before = torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]
            syncs = [_syncs(device, lambda n=n: run(n)) for n in (LONG, SHORT)]
            # Consecutive calls, as a caller makes them: with the cache passed in (reset), and with
            # `cache_implementation="static"` (a new cache at every call); the recordings of each call
            recordings = {}
            for cache_kind in ("passed cache", "new static cache"):
                recordings[cache_kind] = []
                for _ in range(CONSECUTIVE_CALLS):
                    with CudaGraphCounts() as counted:
                        if cache_kind == "passed cache":
                            run(SHORT)
                        else:
                            config.max_new_tokens, config.cache_implementation = SHORT, "static"
                            model.generate(input_ids, attention_mask=mask, generation_config=config)
                            config.cache_implementation = None
                    recordings[cache_kind].append(counted.counts["recordings"])
            found[f"{name} {path}"] = {
                "ms_per_token": 1e3 * per_token,
                **{f"recordings per call, {kind}": counts for kind, counts in recordings.items()},
                **{
                    f"{what} per token": (counts[LONG][what] - counts[SHORT][what]) / steps
                    for what in CudaGraphCounts.METHODS.values()
                },
                "cudagraph skips": torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] - skips_before,
                "syncs per step": None if syncs[0] is None else (syncs[0] - syncs[1]) / steps,
            }
    return {"device": device, "torch": torch.__version__, "figures": found}


def table(results: dict[str, list[dict]]) -> str:
    """Markdown: per model and path, each tree's figures (their least time over the rounds), and the fork / pristine
    ratio of the times."""
    sides = list(results)
    first = results[sides[0]][0]
    keys = sorted({key for runs in results.values() for run in runs for key in run["figures"]})
    columns = [column for column in next(iter(first["figures"].values())) if column != "ms_per_token"]
    lines = [
        f"`make bench-gpu` on {first['device']}, torch {first['torch']}: greedy, a static cache passed in, "
        f"{LONG} and {SHORT} new tokens per call (their difference per token)",
        "",
        f"| model, path | ms per token: {' / '.join(sides)} (ratio) | {' | '.join(columns)} |",
        "|---|---|" + "---|" * len(columns),
    ]
    for key in keys:
        figures = {
            side: [run["figures"][key] for run in runs if key in run["figures"]] for side, runs in results.items()
        }
        times = {side: min((f["ms_per_token"] for f in found), default=None) for side, found in figures.items()}
        shown = " / ".join("-" if t is None else f"{t:.3f}" for t in times.values())
        if None not in times.values() and len(times) == 2:
            shown += f" ({times[sides[1]] / times[sides[0]]:.2f}x)"
        cells = []
        for column in columns:
            values = [str(found[-1][column]) if found else "-" for found in figures.values()]
            cells.append(" / ".join(values))
        lines.append(f"| {key} | {shown} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--calls", type=int, default=3, help="timed pairs of calls per path (default: 3)")
    parser.add_argument("--rounds", type=int, default=1, help="processes per tree (default: 1)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models = args.models.split(",")
    if args.worker:
        args.json.write_text(json.dumps(worker(args.device, models, args.calls)), encoding="utf-8")
        return 0
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = (args.out or ROOT / "bench-out" / f"gpu-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    sources = {"upstream": pristine_tree() / "src", "fork": fork_tree() / "src"}
    worker_args = ["--device", args.device, "--models", args.models, "--calls", str(args.calls)]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        results = run_rounds("bench.gpu_check", sources, args.rounds, out, Path(tmp), worker_args)
    text = table(results)
    (out / "table.md").write_text(text, encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(text + f"\nbench-gpu: wrote {out} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
