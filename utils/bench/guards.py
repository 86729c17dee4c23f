"""`make bench-guards`: what dynamo's guard evaluation costs per token, pristine beside the fork.

In one process per tree and round, times `generate` with a `StaticCache` passed in (its length fixed, so that each
compiled function has one graph) and generate's own compile (`CompileConfig()`, and on the fork
`compile_decoding_step=True` too), on the benchmark's tiny models, greedy, one torch thread: each call once as
it runs and once under `torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)`, after warm-up calls that
compile every graph both need. A token's time is the difference between a call of `NEW_TOKENS` tokens and one of
`FEW_TOKENS`, divided by the tokens between them, in thread CPU time (a descheduled process accrues none); each
figure is the least over the calls and rounds, the rounds alternating the trees. What the guards cost per token is
the difference between the two columns. Both give the same tokens (checked: the stance may run a graph compiled for
other inputs, which is why it is unsafe and only ever an opt-in). Beside them, one evaluation of the guards of the
compiled function that runs each decoding step (the forward's outermost wrapper, or the fork's compiled step), on the
inputs of its last call: the guards it runs, its thread CPU time, and how many of them read a config value again
through `PreTrainedConfig.__getattribute__`. Writes the table and the raw figures into `bench-out/guards-<timestamp>/`.
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import sys
import tempfile
import time
import types
from pathlib import Path

from forktool.common import ROOT

from .trees import pristine_tree, run_rounds, write_results


NEW_TOKENS, FEW_TOKENS = 64, 8
PATHS = ("compile_config", "decoding_step")
# The method of the model that gives the function `generate` compiles for each decoding step, per path
COMPILED_BY = {"compile_config": "get_compiled_call", "decoding_step": "_get_compiled_decoding_step"}


def guard_evaluation(code, f_locals: dict, evaluations: int = 2000) -> dict:
    """
    One evaluation of the guards of `code`'s compiled entry that accepts `f_locals` (the frame's arguments by name),
    as `generate` runs it (without gradients): the guards it runs, the least thread CPU time of an evaluation (us) over
    5 x `evaluations`, and the calls of `PreTrainedConfig.__getattribute__` in one that no other call of it made
    (cProfile's primitive calls: each a config value read again).
    """
    import cProfile
    import pstats

    import torch

    with torch.no_grad():
        entries = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(code)
        managers = [entry.guard_manager for entry in entries if entry.guard_manager.check(f_locals)]
        if not managers:
            reasons = [entry.guard_manager.check_verbose(f_locals).verbose_code_parts for entry in entries]
            raise RuntimeError(f"no compiled entry of {code.co_name} accepts the inputs of its last call: {reasons}")
        manager = managers[0]
        times = []
        for _ in range(5):
            start = time.thread_time_ns()
            for _ in range(evaluations):
                manager.check(f_locals)
            times.append((time.thread_time_ns() - start) / evaluations / 1000)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(100):
            manager.check(f_locals)
        profile.disable()
        guards = manager.check_verbose(f_locals).num_guards_executed
    config_reads = sum(
        primitive_calls
        for (filename, _, function), (primitive_calls, *_) in pstats.Stats(profile).stats.items()
        if function == "__getattribute__" and Path(filename).parts[-2:] == ("transformers", "configuration_utils.py")
    )
    return {"evaluated_guards": guards, "evaluation_us": min(times), "config_reads": config_reads / 100}


def worker(models: list[str], calls: int) -> dict:
    """In the tree on `PYTHONPATH`: per model and path, the least thread CPU time per token (us), with the guards
    evaluated and skipped."""
    import torch

    from transformers import CompileConfig, GenerationConfig, StaticCache

    from . import scenarios

    torch.set_num_threads(1)
    has_step = hasattr(GenerationConfig(), "compile_decoding_step")
    found = {}
    for name in models:
        model = scenarios.tiny_model(name, "cpu")
        input_ids, mask = scenarios.prompt("cpu")
        cache = StaticCache(config=model.config, max_cache_len=input_ids.shape[1] + NEW_TOKENS)
        for path in PATHS if has_step else PATHS[:1]:
            compile_config = CompileConfig()
            compile_config._compile_all_devices = True  # generate compiles on CUDA-like devices only otherwise
            last_call = _record_last_call(model, path)

            def run(new_tokens, compile_config=compile_config):
                config = scenarios.generation_config(new_tokens, static_cache=False, generate_compiles=True)
                config.compile_config = compile_config
                config.compile_decoding_step = path == "decoding_step"
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
            run(FEW_TOKENS)  # the last call, its guards evaluated: the inputs the evaluation below takes
            delattr(model, COMPILED_BY[path])
            args, kwargs = last_call
            if path == "decoding_step":
                from transformers.generation.decoding_step import _decoding_step as function
            else:
                # The compiled `model.__call__`'s first frame: the outermost wrapper of `forward`, on the model too
                function, args = type(model).forward, (model, *args)
            code, f_locals = function.__code__, _frame_locals(function, args, kwargs)
            found[f"{name} {path}"].update(guard_evaluation(code, f_locals))
    return found


def _frame_locals(function, args: tuple, kwargs: dict) -> dict:
    """The locals of `function`'s frame as it starts on `args` and `kwargs`: its arguments and its closure's."""
    # The signature of the code itself, not the one a wrapper declares (`__wrapped__`, `__signature__`)
    code_only = types.FunctionType(function.__code__, {}, None, function.__defaults__, function.__closure__)
    code_only.__kwdefaults__ = function.__kwdefaults__
    bound = inspect.signature(code_only).bind(*args, **kwargs)
    bound.apply_defaults()  # `*args` and `**kwargs` too, empty
    f_locals = dict(bound.arguments)
    cells = function.__closure__ or ()
    f_locals.update(zip(function.__code__.co_freevars, (cell.cell_contents for cell in cells)))
    return f_locals


def _record_last_call(model, path: str) -> list:
    """A list that holds the arguments of the last call of the function `generate` compiles for `path`."""
    last_call = [(), {}]
    method = COMPILED_BY[path]
    get_compiled = getattr(type(model), method)

    def recording(compile_config):
        compiled = get_compiled(model, compile_config)

        def call(*args, **kwargs):
            last_call[:] = args, kwargs
            return compiled(*args, **kwargs)

        return call

    setattr(model, method, recording)  # until the caller deletes it
    return last_call


def table(trees: list[str], results: dict[str, list[dict]]) -> str:
    """Per tree and entry: the least us per token with the guards and with them skipped, over the rounds, their
    difference, and the round's evaluation of the guards that took least (`-` where there is none)."""
    keys = list(dict.fromkeys(key for tree in trees for run in results[tree] for key in run))
    lines = [
        "| tree | entry | us per token | guards skipped | saved by skipping the guards "
        "| one evaluation of the guards: guards / us / config reads |",
        "|---|---|---|---|---|---|",
    ]
    for tree in trees:
        for key in keys:
            if key not in results[tree][0]:
                continue
            guards, skipped = (min(run[key][side] for run in results[tree]) for side in ("guards", "skipped"))
            evaluation = min((run[key] for run in results[tree]), key=lambda entry: entry.get("evaluation_us", 0))
            evaluated = (
                f"{evaluation['evaluated_guards']} / {evaluation['evaluation_us']:.0f} / {evaluation['config_reads']:.0f}"
                if "evaluation_us" in evaluation
                else "-"
            )
            lines.append(f"| {tree} | {key} | {guards:.0f} | {skipped:.0f} | {guards - skipped:.0f} | {evaluated} |")
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
