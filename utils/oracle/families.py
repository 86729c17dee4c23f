"""One tree's side of the oracle's case families: `python -m oracle.families --tree NAME --out PATH [--only f,g]`.

Each family runs cases that the model matrix does not reach, each to a value (tensors, numbers) or an exception,
some with a reference computed another way in the same process (see `oracle.compare.judge` for how two sides are
compared):

- `packed_masks`: sequences packed into one row with a block-diagonal causal 4-D mask (boolean and additive, eager
  and sdpa, batch 1 and 2, with and without `position_ids`) over tiny models of ten architectures, and GPT2 masks of
  ranks 3 and 5; the logits, referenced by each packed sequence run alone with its own positions 0, 1, ... (an
  all-ones mask: by the run without a mask).
- `cache_layers`: every subclass of the cache layer base classes of `cache_utils` and of the modeling files
  (discovered by class hierarchy; the classes that cannot be constructed are listed with the reason), initialized
  ahead of time for batch 2 (as `Cache.early_initialization` does), then a batch operation or none, then updated with
  batch 6; the indexer calls too for layers that have them; the returned tensors.
- `inconsistent_masks`: `generate` (Llama, GPT2; eager and sdpa; static and dynamic cache) with a 2-D mask longer
  and shorter than the prompt and one with a zero in the middle (referenced by the prompt without that token), and
  with a longer mask with a left-padded row in every attention implementation (eager, sdpa, flex), not compiled, with
  `generate`'s own compile of the forward and with the fork's compiled decoding step; the new tokens and scores.
- `memory`: the bytes of tensors reachable from the model after `generate` with a static cache returns (besides its
  parameters and buffers, the output dropped, after `gc.collect()`), with the forward as is, replaced by a
  `functools.wraps` wrapper (as `torch.compile(model.forward)` does) and after `model.compile()` (eager backend); and
  whether the cache is still alive then, and after `del model` without `gc.collect()`.
- `kept_inputs`: the position ids and masks a forward pre-hook keeps at each decoding step, read after `generate`
  (Llama, GPT2; eager and sdpa; static and dynamic cache; not compiled, `generate`'s own compile of the forward and
  the fork's compiled decoding step), and a `MaxLengthCriteria` subclass passed in that stops before `max_length`:
  the lengths it was called at, and the sequences.
- `hooks`: calls of wrappers patched onto `GenerationMixin.prepare_inputs_for_generation`,
  `GenerationMixin._update_model_kwargs_for_generation` and the model class's `prepare_inputs_for_generation` over a
  10-token `generate`, static and dynamic cache.

The driver (`python -m oracle`) runs this module once per tree with `PYTHONPATH` set to the tree.
"""

import argparse
import functools
import gc
import importlib
import inspect
import os
import re
import signal
import sys
import time
import traceback
import types
import weakref
from pathlib import Path

import torch

import oracle
import transformers
import transformers.cache_utils as cache_utils
from oracle.matrix import build_config, err, tree_digest
from transformers import AutoModelForCausalLM, GenerationMixin


transformers.logging.set_verbosity_error()


def case(fn, *args, **kwargs) -> dict:
    """`{"value": fn(...)}`, or the exception's type and message."""
    try:
        return {"value": fn(*args, **kwargs)}
    except Exception as e:  # noqa: BLE001
        return err(e)


def chosen(model_types: tuple, models: set | None) -> list:
    """The model types of a family that `--models` selects (all of them without it)."""
    return [m for m in model_types if models is None or m in models]


def tiny_model(model_type: str, attn: str = "sdpa", **overrides):
    """A tiny random model of `model_type` (the matrix's tiny config), seeded, float32, in eval mode."""
    config, _ = build_config(model_type)
    for name, value in overrides.items():
        setattr(config, name, value)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn).to(torch.float32).eval()


# --- packed 4-D masks ---

PACKED_MODELS = ("llama", "qwen2", "phi3", "gemma", "mistral", "gpt_neox", "opt", "gpt2", "falcon", "gptj")
PACKED_OVERRIDES = {"mistral": {"sliding_window": None}}
SEGMENTS = {1: [(3, 4)], 2: [(3, 4), (5, 2)]}  # the lengths of the sequences packed into each row (7 tokens)


def packed_inputs(batch: int):
    """Token ids, the boolean block-diagonal causal mask `(batch, 7, 7)` and the positions of each packed sequence."""
    ids = torch.randint(3, 99, (batch, 7), generator=torch.Generator().manual_seed(batch))
    mask = torch.zeros(batch, 7, 7, dtype=torch.bool)
    positions = torch.zeros(batch, 7, dtype=torch.long)
    for row, lengths in enumerate(SEGMENTS[batch]):
        start = 0
        for length in lengths:
            mask[row, start : start + length, start : start + length] = True
            positions[row, start : start + length] = torch.arange(length)
            start += length
    return ids, mask & torch.ones(7, 7, dtype=torch.bool).tril(), positions


def additive(mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, 0.0, torch.finfo(torch.float32).min)


@torch.no_grad()
def separately(model, ids: torch.Tensor, batch: int) -> torch.Tensor:
    """The reference of a packed batch: each sequence run alone, without a mask, its logits put back in place."""
    rows = []
    for row, lengths in enumerate(SEGMENTS[batch]):
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        rows.append(torch.cat([model(ids[row : row + 1, s : s + n]).logits[0] for s, n in zip(starts, lengths)]))
    return torch.stack(rows)


@torch.no_grad()
def logits(model, ids, **kwargs) -> torch.Tensor:
    return model(ids, **kwargs).logits


def packed_masks(models: set | None = None) -> tuple[dict, list]:
    cases, notes = {}, []
    for model_type in chosen(PACKED_MODELS, models):
        for attn in ("eager", "sdpa"):
            built = case(tiny_model, model_type, attn, **PACKED_OVERRIDES.get(model_type, {}))
            if "value" not in built:  # GPT-J has no sdpa
                cases[f"{model_type}/{attn}/build"] = built
                notes.append(f"{model_type} with {attn} not built: {built['error_type']}: {built['error'][:200]}")
                continue
            model = built["value"]
            for batch in (1, 2):
                ids, mask, positions = packed_inputs(batch)
                alone = {"each sequence alone": case(separately, model, ids, batch).get("value")}
                for with_positions in (False, True):
                    kwargs = {"position_ids": positions} if with_positions else {}
                    name = (
                        f"{model_type}/{attn}/{{}}/batch{batch}/" + ("" if with_positions else "no ") + "position_ids"
                    )
                    run = case(logits, model, ids, attention_mask=additive(mask[:, None]), **kwargs)
                    cases[name.format("additive")] = {**run, "references": alone}
                    # a boolean mask means what its additive form means
                    references = {**alone, "the additive form of the mask": run.get("value")}
                    run = case(logits, model, ids, attention_mask=mask[:, None], **kwargs)
                    cases[name.format("bool")] = {**run, "references": references}
            if model_type == "gpt2":
                cases.update(gpt2_mask_ranks(model, attn))
    return cases, notes


def gpt2_mask_ranks(model, attn: str) -> dict:
    """GPT2 with masks of ranks 3 and 5: all ones (as integers, like a tokenizer's mask), and the packed mask."""
    ids, mask, positions = packed_inputs(2)
    plain = {"no mask": case(logits, model, ids).get("value")}
    alone = {"each sequence alone": case(separately, model, ids, 2).get("value")}
    masks = {
        "ones rank 3 (2, 1, 7)": (torch.ones(2, 1, 7, dtype=torch.long), plain),
        "ones rank 5 (2, 1, 1, 1, 7)": (torch.ones(2, 1, 1, 1, 7, dtype=torch.long), plain),
        "packed bool rank 3 (2, 7, 7)": (mask, alone),
        "packed additive rank 3 (2, 7, 7)": (additive(mask), alone),
        "packed bool rank 5 (2, 1, 1, 7, 7)": (mask[:, None, None], alone),
        "packed additive rank 5 (2, 1, 1, 7, 7)": (additive(mask[:, None, None]), alone),
    }
    cases = {}
    for name, (attention_mask, references) in masks.items():
        kwargs = {"attention_mask": attention_mask}
        if "packed" in name:
            kwargs["position_ids"] = positions
        cases[f"gpt2/{attn}/{name}"] = {**case(logits, model, ids, **kwargs), "references": references}
    return cases


# --- cache layer classes ---

LAYER_BASES = ("CacheLayerMixin", "LinearAttentionCacheLayerMixin")
LAYER_ARGS = {"max_cache_len": 16, "sliding_window": 4, "number_of_states": 1}
HEADS, HEAD_DIM, INDEX_DIM, CONV_DIM, CONV_KERNEL = 2, 8, 16, 6, 4


def subclasses(bases) -> list:
    found, todo = [], list(bases)
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return found


def import_layer_modules() -> dict:
    """Imports the modeling files that define a subclass of a known cache layer class (the class statements' bases
    name one), until no file is left that does; returns the files that failed to import, with the error."""
    names = set(LAYER_BASES) | {cls.__name__ for cls in layer_classes()}
    class_statement = re.compile(r"^class \w+\(([^)]*)\)", re.MULTILINE)
    pending = sorted((Path(transformers.__file__).parent / "models").glob("*/modeling_*.py"))
    failed, found = {}, True
    while found:
        found = False
        for path in list(pending):
            bases = class_statement.findall(path.read_text(encoding="utf-8"))
            if not any(base.strip().split(".")[-1] in names for group in bases for base in group.split(",")):
                continue
            pending.remove(path)
            found = True
            try:
                importlib.import_module(f"transformers.models.{path.parent.name}.{path.stem}")
            except Exception as e:  # noqa: BLE001
                failed[f"{path.parent.name}/{path.name}"] = f"{type(e).__name__}: {e}"
            names |= {cls.__name__ for cls in layer_classes()}
    return failed


def layer_classes() -> list:
    return subclasses(getattr(cache_utils, base) for base in LAYER_BASES)


def class_config(cls, annotation):
    """The default config named by the annotation of `cls.__init__`'s `config`, from the class's own model folder."""
    package = cls.__module__.rsplit(".", 1)[0]
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    for module_name in (f"{package}.configuration_{package.rsplit('.', 1)[1]}", "transformers"):
        config_cls = getattr(importlib.import_module(module_name), name.strip("'\""), None)
        if config_cls is not None:
            return config_cls()
    raise TypeError(f"no config class named {annotation!r} for `config`")


def construct(cls):
    if inspect.isabstract(cls):
        raise TypeError(f"abstract: {', '.join(sorted(cls.__abstractmethods__))}")
    kwargs = {}
    for name, parameter in list(inspect.signature(cls.__init__).parameters.items())[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name in LAYER_ARGS:
            kwargs[name] = LAYER_ARGS[name]
        elif name == "config":
            kwargs[name] = class_config(cls, parameter.annotation)
        elif parameter.default is parameter.empty:
            raise TypeError(f"no value for its required argument `{name}`")
    return cls(**kwargs)


def states(generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=generator)


BATCH_OPS = {
    "no batch op": lambda layer: None,
    "batch_repeat_interleave(3)": lambda layer: layer.batch_repeat_interleave(3),
    "batch_select_indices([0, 1])": lambda layer: layer.batch_select_indices(torch.tensor([0, 1])),
    "reorder_cache([1, 0])": lambda layer: layer.reorder_cache(torch.tensor([1, 0])),
}


def attention_sequence(cls, op, early: bool) -> list:
    """Early init for batch 2 (or none), `op`, then updates of 3 and 1 tokens with batch 6; the returned tensors."""
    g = torch.Generator().manual_seed(0)
    layer, indexed = construct(cls), hasattr(cls, "update_indexer")
    if early:
        layer.lazy_initialization(torch.zeros(2, HEADS, 0, HEAD_DIM), torch.zeros(2, HEADS, 0, HEAD_DIM))
        if indexed:
            layer.lazy_initialization_indexer(torch.zeros(2, 0, INDEX_DIM))
        op(layer)
    returned = []
    for length in (3, 1):
        returned += [
            t.clone()
            for t in layer.update(states(g, 6, HEADS, length, HEAD_DIM), states(g, 6, HEADS, length, HEAD_DIM))
        ]
        if indexed:
            returned.append(layer.update_indexer(states(g, 6, length, INDEX_DIM)).clone())
    return returned


def linear_sequence(cls, op, early: bool) -> list:
    """The same for the conv and recurrent states of a linear-attention layer."""
    g = torch.Generator().manual_seed(0)
    layer = construct(cls)
    if early:
        layer.lazy_initialization(
            conv_states=torch.zeros(2, CONV_DIM, CONV_KERNEL), recurrent_states=torch.zeros(2, HEADS, 4, 4)
        )
        op(layer)
    returned = []
    for length in (3, 1):
        returned.append(layer.update_conv_state(states(g, 6, CONV_DIM, length)).clone())
        returned.append(layer.update_recurrent_state(states(g, 6, HEADS, 4, 4)).clone())
    return returned


def cache_layers(models: set | None = None) -> tuple[dict, list]:
    """Every layer class, whatever `models` selects."""
    cases = {f"import {path}": {"error_type": "ImportError", "error": e} for path, e in import_layer_modules().items()}
    classes = sorted(layer_classes(), key=lambda c: (c.__module__, c.__name__))
    notes = [f"{len(classes)} layer classes: " + ", ".join(c.__name__ for c in classes)]
    notes += [f"not imported: {path}: {e}" for path, e in cases.items()]
    for cls in classes:
        name = f"{cls.__module__.removeprefix('transformers.')}.{cls.__name__}"
        built = case(construct, cls)
        if "value" not in built:
            cases[f"{name}/construct"] = built
            notes.append(f"not constructed: {cls.__name__}: {built['error_type']}: {built['error'][:200]}")
            continue
        sequences = []
        if issubclass(cls, cache_utils.CacheLayerMixin):
            sequences.append(("", attention_sequence))
        if issubclass(cls, cache_utils.LinearAttentionCacheLayerMixin):
            sequences.append(("linear/", linear_sequence))
        for prefix, sequence in sequences:
            cases[f"{name}/{prefix}no early init, batch 6"] = case(sequence, cls, None, False)
            for op_name, op in BATCH_OPS.items():
                cases[f"{name}/{prefix}early init batch 2, {op_name}, batch 6"] = case(sequence, cls, op, True)
    return cases, notes


# --- generate with masks that do not fit the prompt ---

GENERATE = {"max_new_tokens": 4, "do_sample": False, "eos_token_id": None, "pad_token_id": 0}
# How `generate` runs the decoding steps: eagerly, with its own compile of the forward (`CompileConfig`, eager
# backend), and with the fork's compiled decoding step (`compile_decoding_step`, which pristine does not know: its
# generation config holds the attribute, unread, and pristine runs its own compile)
COMPILE_PATHS = ("not compiled", "compiled forward", "compiled step")


def generation_config(compile_path: str = "not compiled", **kwargs) -> transformers.GenerationConfig:
    config = transformers.GenerationConfig(**{**GENERATE, **kwargs})
    if compile_path != "not compiled":
        config.compile_config = transformers.CompileConfig(backend="eager", mode=None)
        config.compile_config._compile_all_devices = True
        config.compile_decoding_step = compile_path == "compiled step"
    return config


@torch.no_grad()
def new_tokens_and_scores(model, ids, mask, cache: str, compile_path: str = "not compiled", **kwargs) -> dict:
    torch._dynamo.reset()
    out = model.generate(
        ids,
        attention_mask=mask,
        generation_config=generation_config(compile_path, **kwargs),
        cache_implementation="static" if cache == "static" else None,
        output_scores=True,
        return_dict_in_generate=True,
    )
    return {"new tokens": out.sequences[:, ids.shape[1] :].clone(), "scores": torch.stack(out.scores).clone()}


def inconsistent_masks(models: set | None = None) -> tuple[dict, list]:
    ids = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(5))
    middle = torch.tensor([1, 1, 0, 1, 1]).repeat(2, 1)
    cases = {}
    for model_type in chosen(("llama", "gpt2"), models):
        for attn in ("eager", "sdpa"):
            model = tiny_model(model_type, attn)
            for cache in ("static", "dynamic"):
                prefix = f"{model_type}/{attn}/{cache}"
                # A zero in the middle hides that token: the prompt without it gives the same tokens. A mask of
                # another length than the prompt has no such reference: the fork must do what pristine does.
                hidden = case(
                    new_tokens_and_scores, model, ids[:, [0, 1, 3, 4]], torch.ones(2, 4, dtype=torch.long), cache
                )
                masks = {
                    "2-D mask of 7 columns, 5 tokens": (torch.ones(2, 7, dtype=torch.long), {}),
                    "2-D mask of 3 columns, 5 tokens": (torch.ones(2, 3, dtype=torch.long), {}),
                    "2-D mask [1, 1, 0, 1, 1]": (middle, {"the prompt without the masked token": hidden.get("value")}),
                }
                for name, (mask, references) in masks.items():
                    run = case(new_tokens_and_scores, model, ids, mask, cache)
                    cases[f"{prefix}/{name}"] = {**run, "references": references}
    # A 2-D mask longer than the prompt, one row left-padded, 8 new tokens: every attention implementation, every way
    # of compiling
    left_padded = torch.ones(2, 7, dtype=torch.long)
    left_padded[0, :2] = 0
    for model_type in chosen(("llama", "gpt2"), models):
        for attn in ("eager", "sdpa", "flex_attention"):
            built = case(tiny_model, model_type, attn)
            if "value" not in built:
                cases[f"{model_type}/{attn}/the model"] = built
                continue
            model = built["value"]
            for cache in ("static", "dynamic"):
                for compile_path in COMPILE_PATHS if cache == "static" else COMPILE_PATHS[:1]:
                    name = f"{model_type}/{attn}/{cache}/{compile_path}/2-D mask of 7 columns left-padded, 5 tokens"
                    cases[name] = case(
                        new_tokens_and_scores, model, ids, left_padded, cache, compile_path, max_new_tokens=8
                    )
    return cases, []


# --- what a forward hook keeps of the inputs, and a length limit of one's own ---


@torch.no_grad()
def kept_by_a_hook(model_type: str, attn: str, cache: str, compile_path: str) -> dict:
    """The position ids and masks a forward pre-hook keeps (the tensors, not copies) at each step, read after
    `generate` returns: what was handed to the forward must still hold what it held then."""
    torch._dynamo.reset()
    model = tiny_model(model_type, attn)
    kept = []

    def keep(module, args, kwargs):
        masks = kwargs.get("attention_mask")
        masks = masks if isinstance(masks, dict) else {"mask": masks}
        kept.append({"position_ids": kwargs.get("position_ids"), **masks})

    hook = model.register_forward_pre_hook(keep, with_kwargs=True)
    ids = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    model.generate(
        ids,
        attention_mask=mask,
        generation_config=generation_config(compile_path, max_new_tokens=6),
        cache_implementation="static" if cache == "static" else None,
    )
    hook.remove()
    return [
        {name: tensor.clone() for name, tensor in step.items() if isinstance(tensor, torch.Tensor)} for step in kept
    ]


@torch.no_grad()
def length_limit_of_ones_own(model_type: str, compile_path: str) -> dict:
    """A `MaxLengthCriteria` subclass passed in, overriding `__call__` to stop at 8 tokens (`max_length` is 20): the
    lengths it was called at, and the sequences."""
    torch._dynamo.reset()

    class StopAtEight(transformers.MaxLengthCriteria):
        def __init__(self):
            super().__init__(max_length=20)
            self.lengths = []

        def __call__(self, input_ids, scores, **kwargs):
            self.lengths.append(input_ids.shape[1])
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= 8, dtype=torch.bool)

    model = tiny_model(model_type)
    criterion = StopAtEight()
    ids = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(5))
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        generation_config=generation_config(compile_path, max_new_tokens=15),
        cache_implementation="static",
        stopping_criteria=transformers.StoppingCriteriaList([criterion]),
    )
    return {"lengths": criterion.lengths, "sequences": out.clone()}


def kept_inputs(models: set | None = None) -> tuple[dict, list]:
    cases = {}
    for model_type in chosen(("llama", "gpt2"), models):
        for attn in ("eager", "sdpa"):
            for cache in ("static", "dynamic"):
                for compile_path in COMPILE_PATHS if cache == "static" else COMPILE_PATHS[:1]:
                    cases[f"{model_type}/{attn}/{cache}/{compile_path}/kept by a forward pre-hook"] = case(
                        kept_by_a_hook, model_type, attn, cache, compile_path
                    )
        for compile_path in COMPILE_PATHS:
            cases[f"{model_type}/static/{compile_path}/a MaxLengthCriteria subclass stopping at 8"] = case(
                length_limit_of_ones_own, model_type, compile_path
            )
    return cases, []


# --- memory kept after generate ---


def reachable_tensor_bytes(root) -> int:
    """Bytes of the distinct storages of the tensors reachable from `root` through references (not through modules,
    classes or module globals), parameters and buffers of modules left out."""
    skip = {id(vars(m)) for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)}
    own = set()
    for module in root.modules() if isinstance(root, torch.nn.Module) else ():
        own |= {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    seen, storages, todo = set(skip), {}, [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in own and obj.device.type != "meta":
                storages[storage.data_ptr()] = storage.nbytes()
        todo.extend(gc.get_referents(obj))
    return sum(storages.values())


def wrap_forward(model):
    forward = model.forward

    @functools.wraps(forward)
    def wrapper(*args, **kwargs):
        return forward(*args, **kwargs)

    model.forward = wrapper


FORWARDS = {
    "forward as is": lambda model: None,
    "forward replaced by a functools.wraps wrapper": wrap_forward,
    "model.compile(backend='eager')": lambda model: model.compile(backend="eager"),
}


def kept_after_generate(model_type: str, replace_forward) -> dict:
    model = tiny_model(model_type)
    replace_forward(model)
    caches = []  # a weak reference to the cache the forward gets
    model.register_forward_pre_hook(
        lambda module, args, kwargs: caches.append(weakref.ref(kwargs["cache"])), with_kwargs=True
    )
    ids = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(5))
    before = reachable_tensor_bytes(model)
    with torch.no_grad():
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            cache_implementation="static",
            **{**GENERATE, "max_new_tokens": 2},
        )
    gc.collect()
    kept = {"bytes of tensors kept by the model": reachable_tensor_bytes(model) - before}
    kept["cache alive after generate"] = caches[0]() is not None
    gc.disable()
    try:
        del model
        kept["cache alive after `del model` (no gc.collect())"] = caches[0]() is not None
    finally:
        gc.enable()
    return kept


def memory(models: set | None = None) -> tuple[dict, list]:
    """GPT2 with every kind of forward, Llama with the forward as is and wrapped (compiling takes seconds)."""
    cases = {}
    for model_type in chosen(("gpt2", "llama"), models):
        for name in list(FORWARDS) if model_type == "gpt2" else list(FORWARDS)[:2]:
            torch._dynamo.reset()
            cases[f"{model_type}/static/{name}"] = case(kept_after_generate, model_type, FORWARDS[name])
    return cases, []


# --- hooks on the generation methods ---


def counted_generate(model_type: str, cache: str, owner_name: str, method: str) -> int:
    """The calls of a wrapper patched onto `owner.method` (`owner`: `GenerationMixin` or the model's class) over a
    generate of 10 new tokens."""
    model = tiny_model(model_type)
    owner = GenerationMixin if owner_name == "GenerationMixin" else type(model)
    original, calls = owner.__dict__.get(method), []
    patched = getattr(owner, method)

    @functools.wraps(patched)
    def wrapper(*args, **kwargs):
        calls.append(1)
        return patched(*args, **kwargs)

    setattr(owner, method, wrapper)
    try:
        ids = torch.randint(3, 99, (2, 5), generator=torch.Generator().manual_seed(5))
        with torch.no_grad():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                cache_implementation="static" if cache == "static" else None,
                **{**GENERATE, "max_new_tokens": 10},
            )
    finally:
        if original is None:
            delattr(owner, method)
        else:
            setattr(owner, method, original)
    return len(calls)


HOOKED = (
    ("GenerationMixin", "prepare_inputs_for_generation"),
    ("GenerationMixin", "_update_model_kwargs_for_generation"),
    ("the model class", "prepare_inputs_for_generation"),
)


def hooks(models: set | None = None) -> tuple[dict, list]:
    return {
        f"{model_type}/{cache}/{owner}.{method}": case(counted_generate, model_type, cache, owner, method)
        for model_type in chosen(("llama", "gpt2", "phi3"), models)  # Phi3 has its own prepare_inputs_for_generation
        for cache in ("static", "dynamic")
        for owner, method in HOOKED
    }, []


FAMILIES = {name: globals()[name] for name in oracle.FAMILIES}
PER_FAMILY_TIMEOUT = 300  # s; the case running then raises `Timeout`, the next ones run unguarded


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout(f"a family took more than {PER_FAMILY_TIMEOUT}s")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m oracle.families", description=__doc__.splitlines()[0])
    parser.add_argument("--tree", required=True, help="the tree's name in the report")
    parser.add_argument("--out", required=True, type=Path, help="where to save the results (torch.save)")
    parser.add_argument(
        "--only", default=None, help=f"comma-separated families (default: all of {', '.join(FAMILIES)})"
    )
    parser.add_argument(
        "--models", default=None, help="comma-separated model types the families use (default: theirs)"
    )
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(FAMILIES)
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown:
        parser.error(f"--only: unknown families: {', '.join(unknown)}")
    torch.set_num_threads(1)
    gc.collect()
    gc.freeze()  # what is imported by now stays: `gc.collect()` in the cases then takes milliseconds, not a second
    src = os.path.dirname(transformers.__file__)
    results = {"tree": args.tree, "transformers_file": transformers.__file__, "tree_digest_start": tree_digest(src)}
    results["families"], results["notes"], results["seconds"] = {}, {}, {}
    print(f"[{args.tree}] transformers from {transformers.__file__}", flush=True)
    models = set(args.models.split(",")) if args.models else None
    signal.signal(signal.SIGALRM, _alarm)
    for name in names:
        t0 = time.perf_counter()
        signal.alarm(PER_FAMILY_TIMEOUT)
        try:
            results["families"][name], results["notes"][name] = FAMILIES[name](models)
        except Exception as e:  # noqa: BLE001
            # the family as a whole: one case, which differs from a run of the other side
            results["families"][name] = {"(the family did not finish)": err(e)}
            results["notes"][name] = [traceback.format_exc().strip().splitlines()[-1]]
        finally:
            signal.alarm(0)
        results["seconds"][name] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {len(results['families'][name])} cases ({results['seconds'][name]} s)", flush=True)
    results["tree_digest_end"] = tree_digest(src)
    torch.save(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
