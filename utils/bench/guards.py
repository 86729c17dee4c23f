"""`make bench-guards`: what dynamo's guard evaluation costs per token, pristine beside the fork.

In one process per tree and round, times `generate` with a `StaticCache` passed in (its length fixed, so that each
compiled function has one graph) and generate's own compile (`CompileConfig()`, and on the fork
`compile_decoding_step=True` too), on the benchmark's tiny models (`--models`, by default GPT2, Llama and Gemma 2 with
2 layers, and Llama with 16), greedy, one torch thread: each call as it runs, and once with every guard skipped under
`torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)` (a measure only: the stance holds for the whole
process, which is why the fork's step does not use it), after warm-up calls that compile every graph both need. With
the fork's compiled step, also with all of dynamo's guards evaluated at every step (`all_guards`: its later steps run
the function of a call's first step), which is what its guards of the call (`_guards_of_the_call`) save. A token's time
is the difference between a call of `NEW_TOKENS` tokens and one of `FEW_TOKENS`, divided by the tokens between them, in
thread CPU time (a descheduled process accrues none); each figure is the least over the calls and rounds, the rounds
alternating the trees. All give the same tokens (checked). Beside them, one evaluation of the guards of each compiled
function that runs a decoding step (the forward's outermost wrapper; the fork's step: the function of the later steps,
and `checked`, of a call's first step), on the inputs of its last call: the guards it runs, its thread CPU time, and
how many of them read a config value again through `PreTrainedConfig.__getattribute__`. Writes the table and the raw
figures into `bench-out/guards-<timestamp>/`.
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


def guard_evaluation(code, f_locals: dict, region: int = -1, evaluations: int = 2000) -> dict:
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
        entries = torch._dynamo.eval_frame._get_cache_entries_for_region(code, region)
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
    """In the tree on `PYTHONPATH`: per model and path, the least thread CPU time per token (us) as it runs, with every
    guard skipped, and (the fork's step) with all guards at every step; and the evaluations of the guards."""
    import contextlib
    from unittest import mock

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
            last_calls = _record_last_calls(model, path)

            def run(new_tokens, compile_config=compile_config):
                config = scenarios.generation_config(new_tokens, static_cache=False, generate_compiles=True)
                config.compile_config = compile_config
                config.compile_decoding_step = path == "decoding_step"
                cache.reset()
                start = time.thread_time()
                out = model.generate(input_ids, attention_mask=mask, generation_config=config, cache=cache)
                return time.thread_time() - start, out

            variants = {"guards": contextlib.nullcontext, "skipped": _skipped}
            if path == "decoding_step":
                from transformers.generation.decoding_step import _StepFunctions

                @contextlib.contextmanager
                def all_guards():
                    # The later steps run the function of the call's first step, which evaluates all guards
                    with mock.patch.object(_StepFunctions, "one_graph_each", False):
                        yield

                variants["all_guards"] = all_guards
            for new_tokens in (NEW_TOKENS, FEW_TOKENS) * 2:  # warm-up: every graph compiled, every guard evaluated
                for variant in ("guards", "all_guards"):
                    if variant in variants:
                        with variants[variant]():
                            run(new_tokens)
            per_token = {variant: [] for variant in variants}
            for _ in range(calls):
                times, outputs = {}, {}
                for variant, context in variants.items():
                    for new_tokens in (NEW_TOKENS, FEW_TOKENS):
                        with context():
                            times[variant, new_tokens], outputs[variant, new_tokens] = run(new_tokens)
                    per_token[variant].append(
                        1e6 * (times[variant, NEW_TOKENS] - times[variant, FEW_TOKENS]) / (NEW_TOKENS - FEW_TOKENS)
                    )
                for variant in variants:
                    if not torch.equal(outputs["guards", NEW_TOKENS], outputs[variant, NEW_TOKENS]):
                        raise RuntimeError(f"{name} {path}: other tokens with {variant}")
            found[f"{name} {path}"] = {variant: min(values) for variant, values in per_token.items()}
            run(FEW_TOKENS)  # the last call, its guards evaluated: the inputs the evaluations below take
            for function_name, (function, region, args, kwargs) in last_calls.items():
                evaluation = guard_evaluation(function.__code__, _frame_locals(function, args, kwargs), region)
                suffix = "" if function_name == "later" else f"_{function_name}"
                found[f"{name} {path}"].update({f"{key}{suffix}": value for key, value in evaluation.items()})
            model.__dict__.pop("get_compiled_call", None)
            model.__dict__.pop("_get_compiled_decoding_step", None)
    return found


def _skipped():
    import torch

    return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)


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


def _record_last_calls(model, path: str) -> dict:
    """
    Per compiled function `generate` runs for the decoding steps of `path` (`later`: the one of the later steps), the
    frame's function, its `isolate_recompiles` region and the arguments of its last call, filled as they run. The
    compiled forward's first frame is the outermost wrapper of `forward`, on the model (-1: the default region).
    """
    last_calls = {}
    if path == "compile_config":
        get_compiled = type(model).get_compiled_call

        def recording(compile_config):
            compiled = get_compiled(model, compile_config)

            def call(*args, **kwargs):
                last_calls["later"] = (type(model).forward, -1, (model, *args), kwargs)
                return compiled(*args, **kwargs)

            return call

        model.get_compiled_call = recording  # until the worker removes it
        return last_calls
    from transformers.generation.decoding_step import _decoding_step

    get_compiled_step = type(model)._get_compiled_decoding_step

    def recording_step(compile_config):
        compiled = get_compiled_step(model, compile_config)
        functions = type(compiled).functions.__get__(compiled)

        def recording_functions(configuration):
            step_functions = functions(configuration)
            for attribute, key in (("checked", "checked"), ("fast", "later")):
                function = getattr(step_functions, attribute)
                if not getattr(function, "_recording", False):
                    region = function._isolate_recompiles_id

                    def call(*args, _function=function, _key=key, _region=region, **kwargs):
                        last_calls[_key] = (_decoding_step, _region, args, kwargs)
                        return _function(*args, **kwargs)

                    call._recording = True
                    setattr(step_functions, attribute, call)
            return step_functions

        compiled.functions = recording_functions
        return compiled

    model._get_compiled_decoding_step = recording_step  # until the worker removes it
    return last_calls


def table(trees: list[str], results: dict[str, list[dict]]) -> str:
    """Per tree and entry: the least us per token as it runs, with all guards at every step (the fork's step), with
    every guard skipped, over the rounds; and the round's evaluations of the guards that took least, of the function of
    the later steps and (the fork's step) of a call's first step (`-` where there is none)."""
    keys = list(dict.fromkeys(key for tree in trees for run in results[tree] for key in run))
    lines = [
        "| tree | entry | us per token | with all guards at every step | every guard skipped "
        "| one evaluation of the guards of a later step: guards / us / config reads | of a call's first step |",
        "|---|---|---|---|---|---|---|",
    ]

    def least(key, variant):
        values = [run[key][variant] for run in results[tree] if variant in run[key]]
        return f"{min(values):.0f}" if values else "-"

    def evaluated(key, suffix):
        runs = [run[key] for run in results[tree] if f"evaluation_us{suffix}" in run[key]]
        if not runs:
            return "-"
        best = min(runs, key=lambda entry: entry[f"evaluation_us{suffix}"])
        return (
            f"{best[f'evaluated_guards{suffix}']} / {best[f'evaluation_us{suffix}']:.0f} / "
            f"{best[f'config_reads{suffix}']:.0f}"
        )

    for tree in trees:
        for key in keys:
            if key not in results[tree][0]:
                continue
            lines.append(
                f"| {tree} | {key} | {least(key, 'guards')} | {least(key, 'all_guards')} | {least(key, 'skipped')} "
                f"| {evaluated(key, '')} | {evaluated(key, '_checked')} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.guards", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--models", default="gpt2,llama,gemma2,llama16")
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
