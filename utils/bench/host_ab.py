"""`make bench-host-ab`: host time per token after each prefix of the patch series, pristine first.

Builds pristine + the first k patches for each k of `--after` (`0`: pristine alone), then times, in one process
per tree and round, `generate` with a static cache and an inductor-compiled forward (`dynamic=False`) on
the benchmark's tiny models and decoding configurations (`bench.scenarios`: greedy, `eos`, `sampling`), 64 new
tokens, one torch thread. A call's host time is its thread CPU time minus that of its forwards (a descheduled
process accrues none); each tree's figure is the minimum over its calls and rounds, the rounds alternating the
trees. Prints a table (us per token, and the ratio to pristine) and writes it with the raw figures into
`bench-out/host-ab-<timestamp>/`. What a patch buys is the difference between two consecutive rows.
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

from forktool.common import ROOT, fetch_sdist, read_series, read_upstream
from forktool.materialize import build_tree

from .trees import pristine_tree, run_rounds, write_results


NEW_TOKENS = 64
CONFIGS = ("greedy", "eos", "sampling")


def worker(models: list[str], calls: int) -> dict:
    """In the tree on `PYTHONPATH`: per model and configuration, the least host and forward time per token (us)."""
    import torch

    from . import scenarios

    torch.set_num_threads(1)
    found = {}
    for name in models:
        model = scenarios.tiny_model(name, "cpu")
        input_ids, mask = scenarios.prompt("cpu")
        forward = torch.compile(model.forward, dynamic=False)
        spent = {"forward": 0.0}

        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return forward(*args, **kwargs)
            finally:
                spent["forward"] += time.thread_time() - start

        timed.__wrapped__ = forward  # `generate` reads the forward's signature
        model.forward = timed
        for config_name in CONFIGS:
            decoding = None if config_name == "greedy" else config_name
            config = scenarios.generation_config(NEW_TOKENS, static_cache=True, decoding=decoding)
            host, inside = [], []
            for n in range(3 + calls):  # 3 warm-up calls
                spent["forward"] = 0.0
                torch.manual_seed(0)
                start = time.thread_time()
                out = model.generate(input_ids, attention_mask=mask, generation_config=config)
                total = time.thread_time() - start
                if out.shape[1] != input_ids.shape[1] + NEW_TOKENS:
                    raise RuntimeError(f"{name} {config_name}: {out.shape[1] - input_ids.shape[1]} new tokens")
                if n >= 3:
                    host.append(1e6 * (total - spent["forward"]) / NEW_TOKENS)
                    inside.append(1e6 * spent["forward"] / NEW_TOKENS)
            found[f"{name} {config_name}"] = {"host_us": min(host), "forward_us": min(inside)}
    return found


def table(trees: list[str], results: dict[str, list[dict]]) -> str:
    keys = list(results[trees[0]][0])
    best = {tree: {key: min(run[key]["host_us"] for run in results[tree]) for key in keys} for tree in trees}
    lines = ["| tree | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for tree in trees:
        cells = [
            f"{best[tree][key]:.0f}" + (f" ({best[tree][key] / best[trees[0]][key]:.2f}x)" if tree != trees[0] else "")
            for key in keys
        ]
        lines.append(f"| {tree} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.host_ab", description=__doc__.splitlines()[0])
    parser.add_argument("--after", required=True, help="comma-separated patch counts, e.g. 15,16,17 (0 is pristine)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    models = args.models.split(",")
    if args.worker:
        args.json.write_text(json.dumps(worker(models, args.calls)), encoding="utf-8")
        return 0
    counts = [int(k) for k in args.after.split(",")]
    upstream, patches = read_upstream(ROOT), read_series(ROOT)
    if any(k < 0 or k > len(patches) for k in counts):
        raise SystemExit(f"bench.host_ab: the series has {len(patches)} patches, not {max(counts)}")
    sdist = fetch_sdist(upstream)
    out = ROOT / "bench-out" / f"host-ab-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"pristine": pristine_tree() / "src"}
        for k in counts:
            if k:
                tree = Path(tmp) / f"after-{k}"
                build_tree(tree, upstream, patches[:k], sdist)
                sources[f"after {k} ({patches[k - 1].name[:4]})"] = tree / "src"
        worker_args = ["--after", "0", "--models", args.models, "--calls", str(args.calls)]
        results = run_rounds("bench.host_ab", sources, args.rounds, out, Path(tmp), worker_args)
    load = os.getloadavg()[0]
    text = (
        f"host us per token (generate minus its forwards, thread CPU time, least over {args.calls} calls x "
        f"{args.rounds} rounds), {NEW_TOKENS} new tokens, {os.cpu_count()} CPU cores, load average {load:.1f} at "
        f"the end\n\n{table(list(sources), results)}\n"
    )
    write_results(out, text, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
