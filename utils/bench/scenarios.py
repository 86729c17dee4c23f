"""The benchmark's scenarios, run inside one side's process: `python -m bench.scenarios --side NAME --json PATH`.

The driver (`python -m bench`) starts this module once per side and repetition, with the same interpreter and
`PYTHONPATH` pointing at either the pristine upstream tree or the fork, so the same code measures both. Everything
here uses public API only (plus torch's dynamo counters and logs); a scenario that fails is reported as its status.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import logging
import os
import platform
import resource
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.utils._pytree as pytree
from torch._dynamo.utils import counters

import transformers
from transformers import (
    CompileConfig,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3TextConfig,
    GenerationConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    SiglipVisionConfig,
)
from transformers.cache_utils import Cache, DynamicCache, QuantizedLayer, StaticCache


VOCAB_SIZE = 128
PAD_TOKEN_ID = 0
EOS_TOKEN_ID = 2  # the eos token of the decoding configurations that have one (`DECODE_CONFIGS`)
BATCH_SIZE = 2
PROMPT_LENGTH = 8
LEFT_PADDING = 3  # the first row of the batch is left padded by this many tokens

# Scenario sizes: (quick, full)
SIZES = {
    "quick": {"new_tokens": 8, "repeats": 3, "limit_calls": 20, "recompile_steps": 6, "flush_steps": 8, "calls": 3},
    "full": {
        "new_tokens": 32,
        "repeats": 9,
        "limit_calls": 200,
        "recompile_steps": 16,
        "flush_steps": 12,
        "calls": 5,
    },
}
SCENARIOS = ["decode", "depth", "size", "speculative", "calls", "recompiles", "tracing", "mask_matrix"]
MODELS = {"quick": ["gpt2"], "full": ["gpt2", "llama", "gemma2", "gemma3"]}
# Gemma 3 multimodal (`Gemma3ForConditionalGeneration`, as its instruction checkpoints load): these prompt tokens are
# one image's tokens, of the image given as pixel values
IMAGE_TOKEN_ID, IMAGE_TOKENS = VOCAB_SIZE - 1, slice(LEFT_PADDING + 1, LEFT_PADDING + 5)
# The compile paths users are taught, timed beside the benchmark's own `torch.compile(model.forward, dynamic=False)`
# (the model's key in the results is `<model> <path>`): generate's own compilation (`CompileConfig()`: `dynamic=None`,
# `mode="reduce-overhead"`; on CPU only with `_compile_all_devices`), and the recipe of the docs (`torch.compile(
# model.forward, mode="reduce-overhead", fullgraph=True)`, `dynamic=None`)
DECODE_PATHS = ["compile_config", "recipe"]
# The fork's compiled decoding step (`compile_decoding_step=True`, generate's own compilation otherwise as
# `compile_config`), timed beside `compile_config` in the greedy configuration and each of `DECODE_CONFIGS` (keys
# `<model> decoding_step[ <configuration>]`, and `<model> compile_config <configuration>`), and a hand-written loop
# over the same compiled forward as its floor (`<model> handwritten`). Not for Gemma 3 multimodal, whose own
# `prepare_inputs_for_generation` keeps it in the regular loop.
STEP_MODELS = ["gpt2", "llama", "gemma2"]
# Deep models timed in the greedy configuration only, with the step, generate's own compile and the hand-written loop
# (the `depth` scenario: with `--long`; what the step's host work per token does with the model's depth)
DEEP_STEP_MODELS = ["llama16"]
# A model of the size users run on CPU (SmolLM2-135M's shape, random weights), timed in a tree's first run only (the
# `size` scenario: its compiles take minutes), greedy, with generate's own compile and the step: where the host's work
# per token is a small part of the forward's, what the gains of the tiny models become
SIZE_MODELS = ["llama135m"]
# Speculative decoding (the `speculative` scenario): a tiny Llama, batch 1 (assisted decoding takes one row), greedy,
# with a static cache and generate's own compile (`CompileConfig()`), on a prompt that repeats itself. Keys
# `llama speculative <method>`: `assistant`, an assistant model with the main model's weights drafting
# `ASSISTANT_TOKENS` tokens a step (a constant schedule, no confidence threshold: every candidate is accepted, so what
# is timed is the mechanism's own cost; the assistant's own generation as its config gives it, uncompiled with a
# dynamic cache), `prompt_lookup` (`PROMPT_LOOKUP_TOKENS` candidates at most), and beside them the same call without
# speculation (`none`) and the fork's compiled decoding step (`decoding_step`)
SPECULATIVE_MODEL = "llama"
SPECULATIVE_PROMPT = [5, 6, 7, 8] * 3
SPECULATIVE_METHODS = ["none", "assistant", "prompt_lookup", "decoding_step"]
ASSISTANT_TOKENS = 4
PROMPT_LOOKUP_TOKENS = 3
# Models timed with fewer calls per path in a full run: Gemma 3 multimodal, whose calls on pristine take about 10x
# a tiny model's (about 9 ms per token past its window), far from any goal's threshold
FEWER_REPEATS = {"gemma3": 6}
# Each model's layers and hidden size (the results name them)
MODEL_SHAPES = {
    "gpt2": (2, 32), "llama": (2, 32), "gemma2": (2, 32), "gemma3": (2, 32), "llama16": (16, 32), "llama135m": (30, 576),
}  # fmt: skip
# The decoding configurations users run, timed beside the greedy one with the same compiled forward: the model's
# key in the results is `<model> <configuration>`. Each has an eos token, which `min_new_tokens` keeps from being
# generated, so that the calls run to length: the min-length logits processors and the eos stopping criterion run
# at every step.
DECODE_CONFIGS = {
    "eos": {"eos_token_id": EOS_TOKEN_ID},
    "sampling": {
        "eos_token_id": EOS_TOKEN_ID,
        "do_sample": True,
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.9,
        "repetition_penalty": 1.1,
    },
}
SLIDING_WINDOW = 4  # Gemma 2's sliding window layers: the prompt and the generated tokens go past it
# (name, static cache, `dynamic` of torch.compile): torch.compile's default `dynamic=None` marks sizes that change
# between calls as dynamic, the `SymInt` inputs CUDA graphs record once per value
# The models whose decoding graphs the full run counts: those with sliding window layers, where pristine and the fork
# differ (the full attention models compile one graph with no `SymInt` on both; `make bench-quick` counts GPT2's)
RECOMPILE_MODELS = ["gemma2", "gemma3"]
RECOMPILE_CONFIGS = {
    "static_cache": (True, False),
    "static_cache_dynamic_none": (True, None),
    "dynamic_cache": (False, True),
}
# The configurations the full run counts: the static cache's, which the README's headline and docs/bench.md read
RECOMPILE_FULL_CONFIGS = ["static_cache", "static_cache_dynamic_none"]
MASK_PATHS = [  # (attention, attn_implementation, reorder_and_upcast_attn)
    ("self", "eager", False),
    ("self", "eager", True),
    ("self", "sdpa", False),
    ("cross", "eager", False),
    ("cross", "eager", True),
    ("cross", "sdpa", False),
]
MASK_KINDS = ["bool", "additive", "static_length"]
TRACING_CASES = [
    "compile_fullgraph_early_cache",
    "export_strict",
    "export_non_strict",
    "aot_export_joint_simple",
    "quantized_across_flushes",
]


def first_line(exc: BaseException) -> str:
    """`ExceptionType: first line of the message`, the way the matrices report a failure."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0].strip() if lines else ''}".rstrip(": ")


def guarded(measure, *args) -> dict:
    """`measure(*args)`, or `{"status": <the error's first line>}` when it raises (the traceback goes to the log):
    a failing scenario is reported, and never ends the side's process. The scenario runs on a settled heap (see
    `settled_heap`)."""
    try:
        with settled_heap():
            return measure(*args)
    except Exception as e:
        traceback.print_exc()
        return {"status": first_line(e)}


@contextlib.contextmanager
def settled_heap():
    """Collects garbage, then freezes the objects alive (`gc.freeze`) until the end of the block: a full collection
    that falls inside a timed call then scans the objects made since, not every object of the imports and of the
    earlier scenarios. On the project's machine such a full collection took about 0.4 s, and where it fell (in one
    tree's first `generate` call and not in the other's) depended on how many objects each tree had allocated so far,
    not on the call being timed."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def tiny_model(name: str, device: str, attn_implementation: str = "sdpa", **kwargs):
    """A 2-layer GPT2, Llama, Gemma 2 (one sliding window layer of `SLIDING_WINDOW` tokens, one full attention
    layer; eager attention, the only one it takes) or Gemma 3 multimodal (its text model as Gemma 2's, a 1-layer
    vision tower) with random weights (seeded), float32, in eval mode. No eos: generate runs to length."""
    torch.manual_seed(0)
    common = {"vocab_size": VOCAB_SIZE, "bos_token_id": 1, "eos_token_id": None, "pad_token_id": PAD_TOKEN_ID}
    # Llama's sizes, and Gemma's head size and sliding window
    sizes = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
    }
    gemma = {"head_dim": 8, "sliding_window": SLIDING_WINDOW}
    if name == "gpt2":
        config = GPT2Config(n_positions=128, n_embd=32, n_layer=2, n_head=4, **common, **kwargs)
        model_class = GPT2LMHeadModel
    elif name in ("llama", "llama16"):
        # `llama16`: the same with 16 layers, where what a decoding step costs outside its kernels shows its depth
        config = LlamaConfig(**{**sizes, "num_hidden_layers": 16 if name == "llama16" else 2}, **common, **kwargs)
        model_class = LlamaForCausalLM
    elif name == "llama135m":
        # SmolLM2-135M's shape: 30 layers, hidden 576, 9 heads, 3 KV heads, vocab 49152
        shape = {
            "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
            "num_key_value_heads": 3, "max_position_embeddings": 128,
        }  # fmt: skip
        config = LlamaConfig(**shape, **{**common, "vocab_size": 49152}, tie_word_embeddings=True, **kwargs)
        model_class = LlamaForCausalLM
    elif name == "gemma2":
        config = Gemma2Config(**sizes, **gemma, **common, **kwargs)
        model_class = Gemma2ForCausalLM
        attn_implementation = "eager"
    elif name == "gemma3":
        text_config = Gemma3TextConfig(**sizes, **gemma, layer_types=["sliding_attention", "full_attention"], **common)
        vision_config = SiglipVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            image_size=8,
            patch_size=2,
        )
        config = Gemma3Config(
            text_config=text_config,
            vision_config=vision_config,
            mm_tokens_per_image=IMAGE_TOKENS.stop - IMAGE_TOKENS.start,
            image_token_index=IMAGE_TOKEN_ID,
            **kwargs,
        )
        config.eos_token_id, config.pad_token_id = None, PAD_TOKEN_ID
        model_class = Gemma3ForConditionalGeneration
    else:
        raise ValueError(f"unknown model {name!r}")
    config._attn_implementation = attn_implementation
    return model_class(config).to(device).eval()


def model_inputs(name: str, device: str) -> dict:
    """`generate`'s inputs for model `name`: the prompt and its mask, and for Gemma 3 an image (its tokens in both
    rows, the pixel values and the token types)."""
    input_ids, mask = prompt(device)
    inputs = {"input_ids": input_ids, "attention_mask": mask}
    if name == "gemma3":
        input_ids.masked_fill_(input_ids == IMAGE_TOKEN_ID, IMAGE_TOKEN_ID - 1)
        input_ids[:, IMAGE_TOKENS] = IMAGE_TOKEN_ID
        generator = torch.Generator().manual_seed(2)
        inputs["pixel_values"] = torch.randn(BATCH_SIZE, 3, 8, 8, generator=generator).to(device)
        inputs["token_type_ids"] = (input_ids == IMAGE_TOKEN_ID).long()
    return inputs


def prompt(device: str, length: int = PROMPT_LENGTH) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch 2, the first row left padded: token ids and their 2-D attention mask."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, VOCAB_SIZE, (BATCH_SIZE, length), generator=generator)
    mask = torch.ones(BATCH_SIZE, length, dtype=torch.long)
    mask[0, :LEFT_PADDING] = 0
    return input_ids.masked_fill(mask == 0, PAD_TOKEN_ID).to(device), mask.to(device)


def generation_config(
    new_tokens: int, static_cache: bool, generate_compiles: bool = False, decoding: str | None = None
):
    """Greedy, exactly `new_tokens` tokens, or one of `DECODE_CONFIGS` (`decoding`: still exactly `new_tokens`
    tokens); generate's own compilation is off (the benchmark compiles the forward) unless `generate_compiles` (then
    `disable_compile` is left unset: generate decides, as for a user)."""
    config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, pad_token_id=PAD_TOKEN_ID, eos_token_id=None)
    if decoding is not None:
        config.update(**DECODE_CONFIGS[decoding], min_new_tokens=new_tokens)
    if not generate_compiles:
        config.disable_compile = True
    if static_cache:
        config.cache_implementation = "static"
    return config


class TimedForward:
    """Wraps a (compiled) forward: times each call (wall and CPU time), and records the attention mask's shape and
    address."""

    def __init__(self, forward, synchronize: bool):
        self.forward = forward
        # `generate` reads the forward's signature (e.g. to pass `position_ids`): the wrapped forward's, as with
        # `model.forward = torch.compile(model.forward)`
        self.__wrapped__ = forward
        self.synchronize = synchronize
        self.calls: list[tuple[float, float]] = []  # (start, duration) per call, wall time
        self.cpu_calls: list[tuple[float, float]] = []  # the same in the process's CPU time
        self.mask_shapes: list[tuple[int, ...] | None] = []
        self.mask_addresses: list[int | None] = []
        self.last_call = None

    def reset(self) -> None:
        self.calls.clear()
        self.cpu_calls.clear()
        self.mask_shapes.clear()
        self.mask_addresses.clear()

    def __call__(self, *args, **kwargs):
        started = self.begin(args, kwargs)
        output = self.forward(*args, **kwargs)
        self.end(started)
        return output

    def begin(self, args, kwargs) -> tuple[float, float]:
        """Record a forward's inputs; its start (wall clock, CPU time)."""
        mask = kwargs.get("attention_mask")
        # One mask, or one per layer type (models with sliding window layers)
        masks = [mask[key] for key in sorted(mask)] if isinstance(mask, dict) else [mask]
        tensors = [m for m in masks if isinstance(m, torch.Tensor)]
        self.mask_shapes.append(tuple(tuple(m.shape) for m in tensors) if tensors else None)
        self.mask_addresses.append(tuple(m.data_ptr() for m in tensors) if tensors else None)
        self.last_call = (args, kwargs)
        return time.perf_counter(), time.process_time()

    def end(self, started: tuple[float, float]) -> None:
        if self.synchronize:
            torch.cuda.synchronize()
        start, cpu_start = started
        self.calls.append((start, time.perf_counter() - start))
        self.cpu_calls.append((cpu_start, time.process_time() - cpu_start))

    def time_eager_calls(self, model) -> None:
        """Also time the calls of `model` that run eagerly: generate's own compilation runs the prefill eagerly, and
        the decoding steps through the compiled call timed by `self`. The model's forward is wrapped on the instance,
        doing nothing more where dynamo traces it (no module hook: with one, the fork's compiled decoding step runs the
        regular loop)."""
        forward = model.forward

        @functools.wraps(forward)
        def timed_forward(*args, **kwargs):
            if torch.compiler.is_compiling():
                return forward(*args, **kwargs)
            started = self.begin(args, kwargs)
            output = forward(*args, **kwargs)
            self.end(started)
            return output

        model.forward = timed_forward


class RecompileLog(logging.Handler):
    """Collects dynamo's recompile messages (`torch._logging.set_logs(recompiles=True)`) while active."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []

    def __enter__(self):
        torch._logging.set_logs(recompiles=True)
        logging.getLogger("torch._dynamo").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("torch._dynamo").removeHandler(self)
        torch._logging.set_logs()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Recompiling function" in message or "triggered by the following guard failure" in message:
            self.messages.append(message)

    def reasons(self, limit: int = 3) -> list[str]:
        """The first guard failure of each recompile (distinct ones, at most `limit`)."""
        found = []
        for message in self.messages:
            lines = [line.strip(" -") for line in message.splitlines() if "guard failure" not in line]
            reason = next((line for line in lines[1:] if line), lines[0] if lines else "")
            if reason not in found:
                found.append(reason)
        return found[:limit]

    @property
    def rank_mismatches(self) -> int:
        return sum("rank mismatch" in message for message in self.messages)


@contextlib.contextmanager
def cudagraph_recordings(device: str):
    """Counts CUDA-graph recordings of inductor's cudagraph trees (yields None off CUDA)."""
    if device != "cuda":
        yield None
        return
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.CUDAGraphTreeManager
    original = manager.record_function
    box = {"recordings": 0}

    def counting(self, *args, **kwargs):
        box["recordings"] += 1
        return original(self, *args, **kwargs)

    manager.record_function = counting
    try:
        yield box
    finally:
        manager.record_function = original


def _median(values):
    return statistics.median(values) if values else None


def _scaled(seconds: float | None) -> float | None:
    """Seconds in ms (None stays None)."""
    return None if seconds is None else 1e3 * seconds


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _cpu_seconds() -> float:
    """User + system CPU time of this process and of its children that were waited for (inductor's compiler
    processes): unlike wall time, it does not grow while the process waits for a busy machine's cores."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _generated_code() -> dict[str, int] | None:
    """Bytes of every source file in this process's inductor cache (`TORCHINDUCTOR_CACHE_DIR`, fresh per process
    in the benchmark; None when unset): C++ kernels and Python wrappers on CPU, Triton kernels on CUDA."""
    cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not cache_dir:
        return None
    paths = [path for suffix in ("*.cpp", "*.py") for path in Path(cache_dir).rglob(suffix)]
    return {str(path): path.stat().st_size for path in paths}


def _segments(call_start: float, total: float, calls: list[tuple[float, float]]) -> dict[str, list[float]]:
    """One `generate` call cut at its forwards, in ms: `forward` (each forward, the prefill first) and `host` (the
    time before the first forward, between each forward and the next, and after the last: one more than the
    forwards). Their sum is the call's time; the driver takes each segment's fastest over the calls (the floor)."""
    ends = [start + duration for start, duration in calls]
    marks = [call_start, *(point for start, end in zip([s for s, _ in calls], ends) for point in (start, end))]
    marks.append(call_start + total)
    host = [1e3 * (b - a) for a, b in zip(marks[0::2], marks[1::2])]
    return {"forward": [round(1e3 * d, 5) for _, d in calls], "host": [round(h, 5) for h in host]}


def _cache_is_empty() -> bool | None:
    """Whether this process's inductor cache (`TORCHINDUCTOR_CACHE_DIR`) holds no file yet (None when unset): its
    first compilation of each model is then a cold one."""
    cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not cache_dir:
        return None
    return not any(path.is_file() for path in Path(cache_dir).rglob("*"))


# ---- 1 and 3: decode loop and compile cost -------------------------------------------------------------------


def decode(name: str, device: str, mode: str, sizes: dict, cold_cache: bool | None = None) -> dict:
    """`generate` with a static cache and `model.forward = torch.compile(model.forward)`; times inside and around it.

    The first call is the compile cost (dynamo reset first; a cold one when the process's inductor cache is empty);
    one more call warms up, then `repeats` calls are timed, each in wall time and in the process's CPU time (which
    does not grow while the process waits for a core). Per call: ms per new token, ms per token inside the compiled
    forward, the rest (host), the prefill forward and the median decode forward, and the latency of each decode step
    (from the start of one decode forward to the start of the next: the last one, which has no next, is not a step).
    The process's figure of each timing is its median over the calls; every call's steps are kept (`timed_step_ms`)
    for the driver's stall check. Then the compiled forward alone, replayed on the last decode step's inputs: the
    limit. Then each of `DECODE_CONFIGS` with the same compiled forward, warmed up and timed the same way (their
    entries: the same keys, but the replay's).
    """
    new_tokens = sizes["new_tokens"]
    torch._dynamo.reset()
    counters.clear()
    model = tiny_model(name, device)
    inputs = model_inputs(name, device)
    compiled = torch.compile(model.forward, mode=mode, dynamic=False)
    timer = TimedForward(compiled, synchronize=device == "cuda")
    model.forward = timer
    config = generation_config(new_tokens, static_cache=True)
    run = functools.partial(_timed_generate, model, inputs, device)

    with cudagraph_recordings(device) as recordings:
        code_before = _generated_code()
        cpu_start = _cpu_seconds()
        first, _, _ = run(config)
        compile_cost = {
            "first_generate_s": first,
            "first_generate_cpu_s": _cpu_seconds() - cpu_start,
            "first_forward_s": timer.calls[0][1],
            "graphs": counters["stats"]["unique_graphs"],
            "cold_cache": cold_cache,
            "generated_files": None,
            "generated_kb": None,
        }
        code_after = _generated_code()
        if code_before is not None and code_after is not None:
            new_files = set(code_after) - set(code_before)
            compile_cost["generated_files"] = len(new_files)
            compile_cost["generated_kb"] = sum(code_after[path] for path in new_files) / 1e3
        runs = timed_runs(functools.partial(run, config), timer, new_tokens, sizes["repeats"])
        # The static cache writes at its own running position: reset it (in place, outside the timing) before each
        # replay, so that every replay writes at a valid position with the same shapes and addresses.
        args, kwargs = timer.last_call
        cache = kwargs["cache"]
        limit, limit_cpu = [], []
        with torch.no_grad():
            for _ in range(3):
                cache.reset()
                compiled(*args, **kwargs)
            for _ in range(sizes["limit_calls"]):
                cache.reset()
                _sync(device)
                cpu_start = time.process_time()
                start = time.perf_counter()
                compiled(*args, **kwargs)
                _sync(device)
                limit.append(time.perf_counter() - start)
                limit_cpu.append(time.process_time() - cpu_start)
    result = summarize_runs(runs, timer)
    result.update(
        forward_alone_ms=1e3 * _median(limit),
        forward_alone_cpu_ms=1e3 * _median(limit_cpu),
        forward_alone_fastest_ms=1e3 * min(limit),
        cudagraph_recordings=recordings["recordings"] if recordings is not None else None,
    )
    measured = {"decode": {"status": "ok", **result}, "compile_cost": {"status": "ok", **compile_cost}}
    # The same compiled forward (no new graph: the configurations change nothing it sees) under the other decoding
    # configurations users run: their own host work per token
    for config_name in DECODE_CONFIGS:
        config = generation_config(new_tokens, static_cache=True, decoding=config_name)
        runs = timed_runs(functools.partial(run, config), timer, new_tokens, sizes["repeats"])
        measured[config_name] = {"status": "ok", **summarize_runs(runs, timer)}
    return measured


def _timed_generate(model, inputs: dict, device: str, config: GenerationConfig) -> tuple[float, float, float]:
    """One `generate` call: its wall time, its CPU time and its start (wall clock)."""
    _sync(device)
    cpu_start = time.process_time()
    start = time.perf_counter()
    model.generate(**inputs, generation_config=config)
    _sync(device)
    return time.perf_counter() - start, time.process_time() - cpu_start, start


def time_decoding_steps(model, timer: TimedForward) -> None:
    """Time each call of the fork's compiled decoding step (its two compiled functions, `checked` for the first step
    of a call and `fast` for the later ones) as a forward of `timer`, recording the masks of its inputs."""
    compiled_step = model._get_compiled_decoding_step

    def timed_compiled_step(compile_config):
        compiled = compiled_step(compile_config)
        if not getattr(compiled, "_timed", False):
            functions = compiled.functions

            def timed_functions(configuration):
                step_functions = functions(configuration)
                for name in ("checked", "fast"):
                    function = getattr(step_functions, name)
                    if not getattr(function, "_timed", False):
                        setattr(step_functions, name, _timed_step(function, timer))
                return step_functions

            compiled.functions, compiled._timed = timed_functions, True
        return compiled

    model._get_compiled_decoding_step = timed_compiled_step


def _timed_step(function, timer: TimedForward):
    def timed_step(*args, **kwargs):
        # (model, model_inputs, ...): `timer` records the masks of the step's inputs as a forward's
        started = timer.begin((), args[1])
        output = function(*args, **kwargs)
        timer.end(started)
        return output

    timed_step._timed = True
    return timed_step


def decode_path(
    name: str, device: str, sizes: dict, path: str, decoding: str | None = None, also: tuple[str, ...] = ()
) -> dict:
    """`generate` with a static cache, greedy or in one of `DECODE_CONFIGS` (`decoding`), compiled along one of
    `DECODE_PATHS` or with the compiled decoding step (`path="decoding_step"`), timed as in `decode` (a first call
    that compiles, after a dynamo reset, one more to warm up, then `repeats` calls): the same keys as its greedy
    entry, without the forward replayed alone, plus the first call's time and the graphs compiled. With the decoding
    step, the calls timed are the prefill's forward and each compiled step (its forward and the rest of its work):
    its calls are cut into segments at its steps as the regular loop's are at its forwards. Then each of `also`
    (`DECODE_CONFIGS`, with generate's own compile only), on the same model and compiled call (the configurations
    change nothing the forward sees: as in `decode`, no new graph), warmed up and timed the same way: the result's
    `also` entry, keyed by configuration."""
    if path == "decoding_step" and not hasattr(GenerationConfig(), "compile_decoding_step"):
        return {"status": "not in this tree: GenerationConfig has no compile_decoding_step"}
    torch._dynamo.reset()
    counters.clear()
    model = tiny_model(name, device)
    synchronize = device == "cuda"
    if path == "recipe":
        timer = TimedForward(torch.compile(model.forward, mode="reduce-overhead", fullgraph=True), synchronize)
        model.forward = timer
        config = generation_config(sizes["new_tokens"], static_cache=True, decoding=decoding)
    else:
        config = generation_config(sizes["new_tokens"], static_cache=True, generate_compiles=True, decoding=decoding)
        config.compile_config = CompileConfig()
        config.compile_decoding_step = path == "decoding_step"
        # generate compiles on CUDA-like devices only, unless told otherwise
        config.compile_config._compile_all_devices = True
        # Each forward of generate goes through the compiled call it gets from the model: timed from outside it
        timer = _timed_compiled_calls(model, synchronize)
        if path == "decoding_step":
            time_decoding_steps(model, timer)
    inputs = model_inputs(name, device)
    run = functools.partial(_timed_generate, model, inputs, device, config)
    first, _, _ = run()
    result = summarize_runs(timed_runs(run, timer, sizes["new_tokens"], sizes["repeats"]), timer)
    result = {"status": "ok", **result, "first_generate_s": first, "graphs": counters["stats"]["unique_graphs"]}
    if also:
        if path != "compile_config":
            raise ValueError(f"`also` shares generate's own compiled call: not for the {path!r} path")
        result["also"] = {}
        for config_name in also:
            other = generation_config(
                sizes["new_tokens"], static_cache=True, generate_compiles=True, decoding=config_name
            )
            other.compile_config = config.compile_config  # the same object: get_compiled_call keeps its compiled call
            other.compile_decoding_step = False
            run = functools.partial(_timed_generate, model, inputs, device, other)
            try:  # each configuration its own status, as when each had its own path
                summary = summarize_runs(timed_runs(run, timer, sizes["new_tokens"], sizes["repeats"]), timer)
            except Exception as e:
                traceback.print_exc()
                result["also"][config_name] = {"status": first_line(e)}
                continue
            result["also"][config_name] = {"status": "ok", **summary, "graphs": counters["stats"]["unique_graphs"]}
    return result


def _timed_compiled_calls(model, synchronize: bool) -> TimedForward:
    """A timer of each forward of `generate` with generate's own compilation: the compiled call it gets from the model
    (`get_compiled_call`), and the forwards that run eagerly (the prefill)."""
    compiled_call, timer = model.get_compiled_call, TimedForward(None, synchronize)
    timer.time_eager_calls(model)

    def timed_compiled_call(compile_config):
        timer.forward = compiled_call(compile_config)
        return timer

    model.get_compiled_call = timed_compiled_call
    return timer


def speculative(device: str, sizes: dict, method: str) -> dict:
    """`generate` of `SPECULATIVE_MODEL` on `SPECULATIVE_PROMPT` with a static cache and generate's own compile, with
    one of `SPECULATIVE_METHODS`, timed as in `decode_path` (a first call that compiles, after a dynamo reset, one
    more to warm up, then `repeats` calls; in every run, as the decode scenario). The forwards timed are the main model's: the assistant's run in the host's
    time. Its decode steps are not kept for the stall check (a step with an assistant holds the assistant's forwards:
    their lengths differ by design); its floors are of the same kind as the other rows'. Also: the graphs compiled by
    the first call and by all of them (`graphs`), the shapes the verification forward took (`decode_mask_shapes`),
    and whether the tokens are those of greedy `generate` without speculation, uncompiled (`same_tokens`)."""
    if method == "decoding_step" and not hasattr(GenerationConfig(), "compile_decoding_step"):
        return {"status": "not in this tree: GenerationConfig has no compile_decoding_step"}
    torch._dynamo.reset()
    counters.clear()
    new_tokens = sizes["new_tokens"]
    model = tiny_model(SPECULATIVE_MODEL, device)
    input_ids = torch.tensor([SPECULATIVE_PROMPT], device=device)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    expected = model.generate(**inputs, generation_config=generation_config(new_tokens, static_cache=True))
    config = generation_config(new_tokens, static_cache=True, generate_compiles=True)
    config.compile_config = CompileConfig()
    # generate compiles on CUDA-like devices only, unless told otherwise
    config.compile_config._compile_all_devices = True
    if method == "assistant":
        assistant = inputs["assistant_model"] = tiny_model(SPECULATIVE_MODEL, device)  # seeded: the same weights
        assistant.generation_config.update(
            num_assistant_tokens=ASSISTANT_TOKENS, num_assistant_tokens_schedule="constant",
            assistant_confidence_threshold=0,
        )  # fmt: skip
    elif method == "prompt_lookup":
        config.prompt_lookup_num_tokens = PROMPT_LOOKUP_TOKENS
    elif method == "decoding_step":
        config.compile_decoding_step = True
    timer = _timed_compiled_calls(model, device == "cuda")
    if method == "decoding_step":
        time_decoding_steps(model, timer)
    run = functools.partial(_timed_generate, model, inputs, device, config)
    first, _, _ = run()
    graphs_first_call = counters["stats"]["unique_graphs"]
    result = summarize_runs(timed_runs(run, timer, new_tokens, sizes["repeats"]), timer)
    result.update(step_ms=[], step_cpu_ms=[], timed_step_ms=[])
    same_tokens = torch.equal(model.generate(**inputs, generation_config=config), expected)
    graphs = counters["stats"]["unique_graphs"]
    return {
        "status": "ok",
        **result,
        "first_generate_s": first,
        "graphs_first_call": graphs_first_call,
        "graphs": graphs,
        "same_tokens": same_tokens,
        "draft_tokens": {"assistant": ASSISTANT_TOKENS, "prompt_lookup": PROMPT_LOOKUP_TOKENS}.get(method),
    }


def handwritten(name: str, device: str, sizes: dict) -> dict:
    """The floor of a decoding step: a loop written by hand over the same forward, compiled as `CompileConfig()`
    compiles it (`mode="reduce-overhead"`, `dynamic=None`), with a static cache: an eager prefill, then per token the
    compiled forward, `argmax`, and in-place updates of the token, its position ids and the 2-D attention mask (as
    long as the cache; the forward builds the 4-D masks from it). Timed as in `decode` (a first call that compiles,
    one more to warm up, then `repeats` calls), each call greedy, exactly `new_tokens` tokens. Timed in the trees that
    have the compiled decoding step only, whose floor it is (the headline's row reads the fork's)."""
    if not hasattr(GenerationConfig(), "compile_decoding_step"):
        return {"status": "not in this tree: the floor of the compiled decoding step, which it has not"}
    torch._dynamo.reset()
    counters.clear()
    new_tokens = sizes["new_tokens"]
    model = tiny_model(name, device)
    inputs = model_inputs(name, device)
    input_ids, prompt_mask = inputs["input_ids"], inputs["attention_mask"]
    batch_size, length = input_ids.shape
    max_length = length + new_tokens
    timer = TimedForward(torch.compile(model.forward, mode="reduce-overhead"), device == "cuda")
    eager = model.forward
    cache = StaticCache(config=model.config, max_cache_len=max_length)

    @torch.no_grad()
    def loop():
        cache.reset()
        tokens = torch.zeros(batch_size, max_length, dtype=torch.long, device=device)
        tokens[:, :length] = input_ids
        mask = torch.zeros(batch_size, max_length, dtype=torch.long, device=device)
        mask[:, :length] = prompt_mask
        position_ids = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
        timer.forward = eager
        logits = timer(input_ids=input_ids, attention_mask=prompt_mask, position_ids=position_ids, cache=cache).logits
        token = logits[:, -1].argmax(-1, keepdim=True)
        position = torch.tensor([length], device=device)
        position_ids = position_ids[:, -1:] + 1
        timer.forward = compiled
        for _ in range(new_tokens - 1):
            tokens.index_copy_(1, position, token)
            mask.index_fill_(1, position, 1)
            logits = timer(input_ids=token, attention_mask=mask, position_ids=position_ids, cache=cache).logits
            token = logits[:, -1].argmax(-1, keepdim=True)
            position.add_(1)
            position_ids.add_(1)
        tokens.index_copy_(1, position, token)
        return tokens

    compiled = timer.forward

    def run():
        _sync(device)
        cpu_start = time.process_time()
        start = time.perf_counter()
        loop()
        _sync(device)
        return time.perf_counter() - start, time.process_time() - cpu_start, start

    first, _, _ = run()
    # The same tokens as greedy `generate` with the compiled forward: the floor does the same work
    expected = tiny_model(name, device).generate(**inputs, generation_config=generation_config(new_tokens, True))
    same_tokens = torch.equal(loop(), expected)
    result = summarize_runs(timed_runs(run, timer, new_tokens, sizes["repeats"]), timer)
    graphs = counters["stats"]["unique_graphs"]
    return {"status": "ok", **result, "first_generate_s": first, "graphs": graphs, "same_tokens": same_tokens}


def timed_runs(run, timer: TimedForward, new_tokens: int, repeats: int) -> list[dict]:
    """One warm-up call of `run` (a `generate` call: wall time, CPU time, start), then `repeats` timed ones."""
    run()
    runs = []
    for _ in range(repeats):
        timer.reset()
        total, cpu_total, call_start = run()
        inside = sum(duration for _, duration in timer.calls)
        cpu_inside = sum(duration for _, duration in timer.cpu_calls)
        starts = [start for start, _ in timer.calls]
        cpu_starts = [start for start, _ in timer.cpu_calls]
        runs.append(
            {
                "ms_per_token": 1e3 * total / new_tokens,
                "cpu_ms_per_token": 1e3 * cpu_total / new_tokens,
                "forward_ms_per_token": 1e3 * inside / new_tokens,
                "host_ms_per_token": 1e3 * (total - inside) / new_tokens,
                "host_cpu_ms_per_token": 1e3 * (cpu_total - cpu_inside) / new_tokens,
                "prefill_forward_ms": 1e3 * timer.calls[0][1],
                # None with the compiled decoding step, whose decoding forwards run inside it
                "decode_forward_ms": _scaled(_median([duration for _, duration in timer.calls[1:]])),
                "step_ms": [1e3 * (b - a) for a, b in zip(starts[1:], starts[2:])],
                "step_cpu_ms": [1e3 * (b - a) for a, b in zip(cpu_starts[1:], cpu_starts[2:])],
                "forward_calls": len(timer.calls),
                "new_tokens": new_tokens,
                "segments_ms": _segments(call_start, total, timer.calls),
            }
        )
    return runs


def summarize_runs(runs: list[dict], timer: TimedForward) -> dict:
    """The medians over the timed calls, and the steps of the median call (the mask counts: the last call's)."""
    median_run = sorted(runs, key=lambda r: r["ms_per_token"])[len(runs) // 2]
    result = {
        key: _median([r[key] for r in runs if r[key] is not None])
        for key in (
            "ms_per_token",
            "cpu_ms_per_token",
            "forward_ms_per_token",
            "host_ms_per_token",
            "host_cpu_ms_per_token",
            "prefill_forward_ms",
            "decode_forward_ms",
        )
    }
    result.update(
        step_ms=median_run["step_ms"],
        step_cpu_ms=median_run["step_cpu_ms"],
        timed_ms_per_token=[round(r["ms_per_token"], 5) for r in runs],
        timed_step_ms=[[round(step, 5) for step in r["step_ms"]] for r in runs],
        timed_segments_ms=[r["segments_ms"] for r in runs],
        forward_calls=median_run["forward_calls"],
        new_tokens=median_run["new_tokens"],
        decode_mask_shapes=len(set(timer.mask_shapes[1:])),
        decode_mask_addresses=len(set(timer.mask_addresses[1:])),
    )
    return result


# ---- 6: consecutive generate calls -----------------------------------------------------------------------------


def timed_calls(model, inputs: dict, device: str, config: GenerationConfig, n_calls: int) -> dict:
    """`n_calls` consecutive `generate` calls of the same shape, right after `torch._dynamo.reset()` (the first one
    compiles): the wall time of each (ms) and, on CUDA, the CUDA-graph recordings during each."""
    torch._dynamo.reset()
    call_ms, recorded = [], []
    with cudagraph_recordings(device) as recordings:
        for _ in range(n_calls):
            before = recordings["recordings"] if recordings is not None else 0
            _sync(device)
            start = time.perf_counter()
            model.generate(**inputs, generation_config=config)
            _sync(device)
            call_ms.append(1e3 * (time.perf_counter() - start))
            recorded.append(recordings["recordings"] - before if recordings is not None else None)
    return {"status": "ok", "call_ms": call_ms, "cudagraph_recordings": recorded if recordings is not None else None}


def calls(name: str, device: str, mode: str, sizes: dict) -> dict:
    """Per call of `sizes["calls"]` consecutive `generate` calls (static cache): time and CUDA-graph recordings.

    The forward compiled by the benchmark: on CPU as in scenario 1 (`dynamic=False`, generate's compilation off); on
    CUDA the documented recipe, `torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)`. On CUDA also
    `generate_compile`: the user-facing path, `generate` compiling its decoding step itself (nothing passed but the
    static cache); generate compiles only on CUDA-like devices, so it is None on CPU.
    """
    config = generation_config(sizes["new_tokens"], static_cache=True)

    def compiled_forward():
        model = tiny_model(name, device)
        if device == "cuda":
            model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        else:
            model.forward = torch.compile(model.forward, mode=mode, dynamic=False)
        return timed_calls(model, model_inputs(name, device), device, config, sizes["calls"])

    def generate_compile():
        user_config = generation_config(sizes["new_tokens"], static_cache=True, generate_compiles=True)
        return timed_calls(tiny_model(name, device), model_inputs(name, device), device, user_config, sizes["calls"])

    result = guarded(compiled_forward)
    result["generate_compile"] = guarded(generate_compile) if device == "cuda" else None
    return result


# ---- 2: recompiles, graphs and graph breaks ------------------------------------------------------------------


def recompiles(name: str, device: str, config_name: str, steps: int) -> dict:
    """Graphs, recompiles, graph breaks and `SymInt` inputs of a forward compiled with a counting backend over a
    whole `generate`, and the distinct values those inputs take over the decoding steps (a CUDA graph records the
    graph once per value)."""
    static_cache, dynamic = RECOMPILE_CONFIGS[config_name]
    torch._dynamo.reset()
    counters.clear()
    model = tiny_model(name, device)
    inputs = model_inputs(name, device)
    compile_calls: list[int] = []  # the forward call during which each graph was compiled (0 = prefill)
    ops: list[int] = []
    symints: list[int] = []
    symint_values: set[tuple] = set()  # (graph, the values of its `SymInt` inputs) for each decoding step

    def counting_backend(gm, example_inputs):
        graph = len(compile_calls)
        compile_calls.append(len(timer.calls))
        ops.append(sum(node.op == "call_function" for node in gm.graph.nodes))
        positions = [i for i, value in enumerate(example_inputs) if isinstance(value, torch.SymInt)]
        symints.append(len(positions))
        if not positions:
            return gm.forward

        def forward(*args):
            if len(timer.calls) >= 1:
                symint_values.add((graph, tuple(int(args[i]) for i in positions)))
            return gm.forward(*args)

        return forward

    timer = TimedForward(torch.compile(model.forward, backend=counting_backend, dynamic=dynamic), False)
    model.forward = timer
    try:
        config = generation_config(steps, static_cache)
        with RecompileLog() as log:
            model.generate(**inputs, generation_config=config)
    except Exception as e:  # reported as the side's result
        return {"status": first_line(e)}
    return {
        "status": "ok",
        "decode_steps": len(timer.calls) - 1,
        "graphs": len(compile_calls),
        "graphs_after_first_decode_step": sum(call >= 2 for call in compile_calls),
        "graph_breaks": sum(counters["graph_break"].values()),
        "recompiles": len(log.messages),
        "recompile_reasons": log.reasons(),
        "ops_per_graph": ops,
        "symint_inputs_of_decode_graphs": sum(n for call, n in zip(compile_calls, symints) if call >= 1),
        "symint_values_of_decode_steps": len(symint_values),
        "decode_mask_shapes": len(set(timer.mask_shapes[1:])),
        "decode_mask_addresses": len(set(timer.mask_addresses[1:])),
    }


# ---- 4: tracing matrix from an empty cache -------------------------------------------------------------------


class CopyQuantizedLayer(QuantizedLayer):
    """A pure-torch quantized layer whose "quantization" is a copy: it exercises the residual window and flushes."""

    def _quantize(self, tensor, axis):
        return tensor.clone()

    def _dequantize(self, q_tensor):
        return q_tensor


def _rank1_empties(values) -> int:
    """How many of the tensors in `values` (any nesting) are the legacy 1-D empty placeholder `f32[0]`."""
    leaves = pytree.tree_leaves(list(values))
    return sum(isinstance(t, torch.Tensor) and t.dim() == 1 and t.numel() == 0 for t in leaves)


def _traced(case):
    """Run one tracing case: `{"status": "ok", ...measures}` or `{"status": <the error's first line>}`."""
    return guarded(lambda: {"status": "ok", **case()})


def tracing(device: str, flush_steps: int) -> dict:
    model = tiny_model("gpt2", device)
    config = model.config
    input_ids = torch.randint(3, VOCAB_SIZE, (BATCH_SIZE, 5), generator=torch.Generator().manual_seed(2)).to(device)
    head_dim = config.n_embd // config.n_head

    def step(ids, cache):
        return model(ids, cache=cache, use_cache=True).logits

    def with_new_cache(ids):
        return step(ids, DynamicCache(config=config))

    def compile_fullgraph_early_cache():
        inputs = []

        def recording_backend(gm, example_inputs):
            inputs.extend(example_inputs)
            return gm.forward

        torch._dynamo.reset()
        cache = DynamicCache(config=config)
        cache.early_initialization(BATCH_SIZE, config.n_head, head_dim, torch.float32, device)
        with torch.no_grad():
            torch.compile(step, backend=recording_backend, fullgraph=True)(input_ids, cache)
        return {"rank1_empty_graph_inputs": _rank1_empties(inputs)}

    class WithCacheInside(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return with_new_cache(input_ids)

    def export(strict: bool):
        def case():
            seq = torch.export.Dim("seq", min=2, max=32)
            program = torch.export.export(
                WithCacheInside(), (input_ids,), dynamic_shapes={"input_ids": {1: seq}}, strict=strict
            )
            return {"rank1_empty_constants": _rank1_empties(program.constants.values())}

        return case

    def aot_export_joint_simple():
        from torch._functorch.aot_autograd import aot_export_joint_simple as export_joint

        graphs = []

        def exporting_backend(gm, example_inputs):
            graphs.append(export_joint(gm, example_inputs, trace_joint=False))
            return gm.forward

        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(with_new_cache, backend=exporting_backend, fullgraph=True)(input_ids)
        constants = [getattr(g, n.target) for g in graphs for n in g.graph.nodes if n.op == "get_attr"]
        return {"graphs": len(graphs), "rank1_empty_constants": _rank1_empties(constants)}

    def quantized_across_flushes():
        graphs = []

        def counting_backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        torch._dynamo.reset()
        cache = Cache(layers=[CopyQuantizedLayer(residual_length=2) for _ in range(config.n_layer)])
        compiled = torch.compile(step, backend=counting_backend, fullgraph=True)
        flushes = 0
        with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=64), RecompileLog() as log:
            next_ids = step(input_ids, cache)[:, -1:].argmax(-1)
            for _ in range(flush_steps):
                next_ids = compiled(next_ids, cache)[:, -1:].argmax(-1)
                flushes += cache.layers[0].keys.numel() == 0
        return {
            "decode_steps": flush_steps,
            "flushes": flushes,
            "graphs": len(graphs),
            "recompiles": len(log.messages),
            "rank_mismatch_recompiles": log.rank_mismatches,
        }

    cases = {
        "compile_fullgraph_early_cache": compile_fullgraph_early_cache,
        "export_strict": export(True),
        "export_non_strict": export(False),
        "aot_export_joint_simple": aot_export_joint_simple,
        "quantized_across_flushes": quantized_across_flushes,
    }
    with torch.no_grad():
        return {name: _traced(case) for name, case in cases.items()}


# ---- 5: GPT2 mask matrix -------------------------------------------------------------------------------------


def _as_kind(mask: torch.Tensor, kind: str) -> torch.Tensor:
    """A boolean mask (True = attend) as is, or additive (0 = attend, float32 min = masked)."""
    if kind == "bool":
        return mask
    return torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, torch.finfo(torch.float32).min)


def _max_delta(actual: torch.Tensor, expected: torch.Tensor, rows: torch.Tensor) -> float | str:
    delta = (actual[rows] - expected[rows]).abs().max().item()
    return delta if delta == delta else "nan"


def _path_name(attention: str, implementation: str, upcast: bool) -> str:
    return f"{attention}/{implementation}{'+reorder_and_upcast_attn' if upcast else ''}"


def mask_matrix(device: str) -> dict:
    """max |Δ logits| of 4-D masks (bool, additive, longer than the keys) against the 2-D mask, per attention path.

    Self-attention: the decoder's mask is 4-D (causal and padding). Cross-attention: the encoder mask is 4-D, the
    decoder's stays 2-D. Compared on the query rows of real (not padding) tokens, with a fresh `DynamicCache` (the
    mask utilities know the key length from the cache or the encoder states).
    """
    input_ids, mask_2d = prompt(device)
    query_length = input_ids.shape[1]
    rows = mask_2d.bool()
    positions = torch.arange(query_length, device=device)
    encoder_length = 5
    encoder_states = torch.randn(BATCH_SIZE, encoder_length, 32, generator=torch.Generator().manual_seed(3))
    encoder_states = encoder_states.to(device)
    encoder_mask = torch.ones(BATCH_SIZE, encoder_length, dtype=torch.long, device=device)
    encoder_mask[0, :2] = 0
    matrix = {}
    with torch.no_grad():
        for attention, implementation, upcast in MASK_PATHS:
            name = _path_name(attention, implementation, upcast)
            cross = attention == "cross"
            model = tiny_model(
                "gpt2", device, implementation, reorder_and_upcast_attn=upcast, add_cross_attention=cross
            )
            extra = {"encoder_hidden_states": encoder_states} if cross else {}
            if cross:
                expected = model(input_ids, attention_mask=mask_2d, encoder_attention_mask=encoder_mask, **extra)
            else:
                expected = model(input_ids, attention_mask=mask_2d, cache=DynamicCache(config=model.config))
            matrix[name] = {}
            for kind in MASK_KINDS:
                if cross:
                    key_length = encoder_length + (2 if kind == "static_length" else 0)
                    padding = torch.zeros(BATCH_SIZE, key_length, dtype=torch.bool, device=device)
                    padding[:, :encoder_length] = encoder_mask.bool()
                    mask_4d = padding[:, None, None, :].expand(BATCH_SIZE, 1, query_length, key_length)
                    kwargs = {"attention_mask": mask_2d, "encoder_attention_mask": _as_kind(mask_4d, kind)}
                else:
                    key_length = query_length + (4 if kind == "static_length" else 0)
                    padding = torch.zeros(BATCH_SIZE, key_length, dtype=torch.bool, device=device)
                    padding[:, :query_length] = mask_2d.bool()
                    causal = torch.arange(key_length, device=device)[None, :] <= positions[:, None]
                    mask_4d = causal[None, None] & padding[:, None, None, :]
                    kwargs = {
                        "attention_mask": _as_kind(mask_4d, kind),
                        "cache": DynamicCache(config=model.config),
                    }
                try:
                    actual = model(input_ids, **kwargs, **extra)
                    matrix[name][kind] = _max_delta(actual.logits, expected.logits, rows)
                except Exception as e:
                    matrix[name][kind] = first_line(e)
    return matrix


# ---- the side's process --------------------------------------------------------------------------------------


def progress(what: str) -> None:
    """A line the driver shows while the process runs (`bench: ... <what>`)."""
    print(f"progress: {what}", flush=True)


def run_side(side: str, quick: bool, device: str, only: list[str] | None = None) -> dict:
    size = "quick" if quick else "full"
    sizes = SIZES[size]
    mode = "reduce-overhead" if device == "cuda" else "default"
    selected = only or SCENARIOS
    started = time.perf_counter()
    cold_cache = _cache_is_empty()
    result = {
        "side": side,
        "transformers_file": transformers.__file__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "device": device,
        "compile_mode": mode,
        "quick": quick,
        "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
        "inductor_cache_cold": cold_cache,
        "torch_threads": torch.get_num_threads(),
        "model_shapes": {
            name: {"layers": layers, "hidden_size": hidden} for name, (layers, hidden) in MODEL_SHAPES.items()
        },
        "scenarios": {},
    }
    scenarios = result["scenarios"]
    timings = result["scenario_wall_s"] = {}  # where the run's time goes

    def timed(name: str, measure):
        progress(name)
        start = time.perf_counter()
        scenarios[name] = measure()
        timings[name] = time.perf_counter() - start

    if "decode" in selected:
        start = time.perf_counter()
        scenarios["decode"], scenarios["compile_cost"] = {}, {}
        for name in MODELS[size]:
            progress(f"decode {name}")
            # fewer calls of a model with no step goal whose calls take milliseconds per token on pristine
            model_sizes = {**sizes, "repeats": min(sizes["repeats"], FEWER_REPEATS.get(name, sizes["repeats"]))}
            measured = guarded(decode, name, device, mode, model_sizes, cold_cache)
            scenarios["decode"][name] = measured.get("decode", measured)
            scenarios["compile_cost"][name] = measured.get("compile_cost", measured)
            for config_name in DECODE_CONFIGS:
                # Their compile is the model's own (the same graphs)
                scenarios["decode"][f"{name} {config_name}"] = measured.get(config_name, measured)
            for path in DECODE_PATHS:
                # the step models' decoding configurations with generate's own compile, on its compiled call
                also = tuple(DECODE_CONFIGS) if path == "compile_config" and name in STEP_MODELS else ()
                measured = guarded(decode_path, name, device, model_sizes, path, None, also)
                others = measured.pop("also", {})
                scenarios["decode"][f"{name} {path}"] = measured
                for config_name in also:
                    scenarios["decode"][f"{name} {path} {config_name}"] = others.get(config_name, measured)
            if name in STEP_MODELS:
                for config_name in (None, *DECODE_CONFIGS):
                    key = f"{name} decoding_step{f' {config_name}' if config_name else ''}"
                    scenarios["decode"][key] = guarded(
                        decode_path, name, device, model_sizes, "decoding_step", config_name
                    )
                scenarios["decode"][f"{name} handwritten"] = guarded(handwritten, name, device, model_sizes)
        timings["decode"] = time.perf_counter() - start
    if "depth" in selected and size == "full":
        start = time.perf_counter()
        found = scenarios.setdefault("decode", {})
        for name in DEEP_STEP_MODELS:
            progress(f"decode {name}")
            for path in ("compile_config", "decoding_step"):
                found[f"{name} {path}"] = guarded(decode_path, name, device, sizes, path)
            found[f"{name} handwritten"] = guarded(handwritten, name, device, sizes)
        timings["depth"] = time.perf_counter() - start
    if "size" in selected and size == "full":
        start = time.perf_counter()
        found = scenarios.setdefault("decode", {})
        for name in SIZE_MODELS:
            for path in ("compile_config", "decoding_step"):
                progress(f"{name} {path}")
                # 3 timed calls: a call of this model takes seconds, and a tree's first run is its only one
                found[f"{name} {path}"] = guarded(decode_path, name, device, {**sizes, "repeats": 3}, path)
        timings["size"] = time.perf_counter() - start
    if "speculative" in selected:
        start = time.perf_counter()
        found = scenarios.setdefault("decode", {})
        for method in SPECULATIVE_METHODS:
            progress(f"{SPECULATIVE_MODEL} speculative {method}")
            found[f"{SPECULATIVE_MODEL} speculative {method}"] = guarded(speculative, device, sizes, method)
        timings["speculative"] = time.perf_counter() - start
    if "calls" in selected:
        timed("calls", lambda: {name: guarded(calls, name, device, mode, sizes) for name in MODELS[size]})
    if "recompiles" in selected:
        timed(
            "recompiles",
            lambda: {
                name: {
                    config: guarded(recompiles, name, device, config, sizes["recompile_steps"])
                    for config in (RECOMPILE_CONFIGS if size == "quick" else RECOMPILE_FULL_CONFIGS)
                }
                for name in MODELS[size]
                if size == "quick" or name in RECOMPILE_MODELS
            },
        )
    if "tracing" in selected:

        def traced():
            found = guarded(tracing, device, sizes["flush_steps"])
            return dict.fromkeys(TRACING_CASES, found) if "status" in found else found

        timed("tracing", traced)
    if "mask_matrix" in selected:

        def matrix():
            found = guarded(mask_matrix, device)
            if "status" in found:
                found = {_path_name(*path): dict.fromkeys(MASK_KINDS, found["status"]) for path in MASK_PATHS}
            return found

        timed("mask_matrix", matrix)
    result["wall_s"] = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scenarios", description=__doc__.splitlines()[0])
    parser.add_argument("--side", required=True, help="the tree's name in the report (upstream or fork)")
    parser.add_argument("--json", required=True, type=Path, help="where to write this side's results")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--only", default=None, help="comma-separated scenarios (default: all)")
    parser.add_argument("--threads", type=int, default=None, help="torch's intra-op threads (default: torch's own)")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench: --device cuda, but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if args.threads:
        # before anything compiles: inductor's C++ kernels are generated for this many threads
        torch.set_num_threads(args.threads)
    print(f"[bench:{args.side}] transformers from {transformers.__file__}", flush=True)
    only = args.only.split(",") if args.only else None
    result = run_side(args.side, args.quick, args.device, only)
    args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
