"""The first `generate` of a new process, with a cold and a warm inductor cache: what a user's script waits for.

Each measure is its own process (`python -m bench.first_call`), as a user's script is: it imports torch and
transformers, builds one of the benchmark's tiny models, and times its first `generate` (greedy, a static cache,
generate's own compile `CompileConfig()` or the fork's compiled decoding step), in wall time and in CPU time (of the
process and of the compilers and probes it waited for). Per round, tree and path, one inductor cache directory
(`TORCHINDUCTOR_CACHE_DIR`), made for it, and these processes on it, one after the other:

- `cold`: the directory empty, everything compiled;
- `warm` (twice, once with `--quick`): what the cold process wrote, as a second run of the same script finds it;
- `warm_vec_isa_ok` (as often), after one `primer_vec_isa_ok` process: the same with `TORCHINDUCTOR_VEC_ISA_OK=1`.
  In every new process, inductor's C++ backend first checks which vector instruction sets of those the CPU lists it
  can use (`torch/_inductor/cpu_vec_isa.py`, `VecISA.check_build`): for each, it loads a small library built with
  its flags (built once into the cache) in a new Python process. The variable tells inductor to trust the CPU's
  flags instead (where the compiler or the loader cannot use them, compiling then fails rather than falling back to
  scalar code). It is part of inductor's configuration, which keys the FX graph cache: the primer writes the entries
  these processes find, as a user's first run with the variable would (it recompiles the graphs, not the C++
  kernels it finds).
  On CUDA nothing of this runs, and neither do these processes.

The rounds alternate the trees (pristine first); each figure is the least over the processes. `--long` runs three
rounds on three models (the cold compiles then give a verdict: their ranges must not overlap), the default one round
on Llama.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path


# per size: the models, each tree's paths, and the processes of each warm kind per round
MODELS = {"quick": ("gpt2",), "full": ("llama",), "long": ("gpt2", "llama", "gemma2")}
PATHS = {
    "quick": {"upstream": ("compile_config",), "fork": ("decoding_step",)},
    "full": {"upstream": ("compile_config",), "fork": ("compile_config", "decoding_step")},
}
WARM_REPEATS = {"quick": 1, "full": 2}
NEW_TOKENS = 8


def measure(name: str, path: str, device: str) -> dict:
    """This process's first `generate` (and its second, which compiles nothing) of the tiny model `name`."""
    import torch
    from torch._inductor import config as inductor_config

    import transformers
    from transformers import CompileConfig

    from .scenarios import _cpu_seconds, _sync, _timed_generate, generation_config, model_inputs, tiny_model

    model = tiny_model(name, device)
    config = generation_config(NEW_TOKENS, static_cache=True, generate_compiles=True)
    config.compile_config = CompileConfig()
    # generate compiles on CUDA-like devices only, unless told otherwise
    config.compile_config._compile_all_devices = True
    if path == "decoding_step":
        config.compile_decoding_step = True
    inputs = model_inputs(name, device)
    # Whether the fork's compiled step ran the decoding steps (it falls back to the regular loop, with a
    # `logger.info`, where it does not apply): the figure of the path is the step's only if it did
    ran = []
    if path == "decoding_step":
        from transformers.generation.decoding_step import DecodingStep

        def run(step, *args, run=DecodingStep.run):
            result = run(step, *args)
            ran.append(result is not None)
            return result

        DecodingStep.run = run
    _sync(device)
    cpu_start = _cpu_seconds()
    first, _, _ = _timed_generate(model, inputs, device, config)
    first_cpu = _cpu_seconds() - cpu_start
    second, _, _ = _timed_generate(model, inputs, device, config)
    return {
        "transformers_file": transformers.__file__,
        "vec_isa_ok": inductor_config.cpp.vec_isa_ok is True,
        "step_ran": bool(ran) and all(ran) if path == "decoding_step" else None,
        "first_s": first,
        "first_cpu_s": first_cpu,
        "second_s": second,
        "torch_version": torch.__version__,
    }


def _child(side: str, src: Path, name: str, path: str, kind: str, cache: Path, out: Path, args, label: str) -> dict:
    """One process: its measure (a RuntimeError when it fails, imports another tree or, on the step's path, does not
    run the step)."""
    from .trees import run_measure, tree_env

    json_path = out / "raw" / f"first_call-{side}-{name}-{path}-{label}.json"
    log_path = out / "logs" / f"first_call-{side}-{name}-{path}-{label}.log"
    command = [sys.executable, "-m", "bench.first_call", "--child", name, path, "--json", str(json_path)]
    command += ["--device", args.device]
    # inductor's and dynamo's settings of this process do not reach the measure (one that disables a cache would make
    # the warm processes cold), but for those set here
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TORCHINDUCTOR_", "TORCH_COMPILE_", "TORCHDYNAMO_")) and key != "TRITON_CACHE_DIR"
    }
    env = tree_env(src, args.threads, environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    if kind.endswith("vec_isa_ok"):
        env["TORCHINDUCTOR_VEC_ISA_OK"] = "1"
    result = run_measure(command, env, json_path, log_path, src, f"the first call of {side} {name} {path} ({kind})")
    if result["step_ran"] is False:
        raise RuntimeError(
            f"first call of {side} {name} {path} ({kind}): the compiled step did not run (see {log_path})"
        )
    return result


def run(trees: dict[str, Path], out: Path, args, size: str, rounds: int) -> dict:
    """Every round's processes, the rounds alternating the trees (pristine first): {"torch_version", "models": {model:
    {side: {path: {kind: [the first call's wall time in s, per process], f"{kind}_cpu": [its CPU time]}}}}}.
    `size`: quick, full or long."""
    (out / "raw").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    paths, repeats = (
        PATHS["quick" if size == "quick" else "full"],
        WARM_REPEATS["quick" if size == "quick" else "full"],
    )
    found: dict = {"torch_version": None, "models": {}}
    for round_ in range(rounds):
        for name in MODELS[size]:
            for side, src in trees.items():
                for path in paths[side]:
                    entry = found["models"].setdefault(name, {}).setdefault(side, {}).setdefault(path, {})
                    cache = Path(tempfile.mkdtemp(prefix=f"bench-first-call-{side}-"))
                    try:
                        sequence = ["cold", *["warm"] * repeats]
                        if args.device == "cpu":  # inductor's check of the CPU's instruction sets: on CPU only
                            sequence += ["primer_vec_isa_ok", *["warm_vec_isa_ok"] * repeats]
                        for index, kind in enumerate(sequence):
                            label = f"{kind}-{round_ + 1}-{sequence[: index + 1].count(kind)}"
                            print(f"bench: first call, {side} {name} {path} {label} ...", end=" ", flush=True)
                            result = _child(side, src, name, path, kind, cache, out, args, label)
                            entry.setdefault(kind, []).append(round(result["first_s"], 4))
                            entry.setdefault(f"{kind}_cpu", []).append(round(result["first_cpu_s"], 4))
                            found["torch_version"] = result["torch_version"]
                            print(f"{result['first_s']:.1f} s", flush=True)
                    finally:
                        shutil.rmtree(cache, ignore_errors=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.first_call", description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "PATH"), required=True)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = measure(*args.child, args.device)
    result["process_s"] = time.perf_counter() - started
    args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
