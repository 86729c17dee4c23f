"""One tree's side of the oracle: `python -m oracle.matrix --tree NAME --out PATH [--wrap] [--only a,b]`.

Every model type of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, as a tiny random model built from its config class (the
class defaults, with the generic size overrides below applied to the config and its sub-configs, and per-model fixes
in `SPECIAL`): greedy `generate` of 6 tokens, batch 2 with the first row left padded, eos off, scores returned, with a
static cache `generate` makes, a dynamic cache, and a `StaticCache` passed in and reset between two calls (`passed`,
both calls compared). With `--wrap` the instance's forward is replaced by a `functools.wraps` wrapper
first (the path of a user-compiled forward) and every `lazy_initialization` of a static layer is recorded: whether
the cache was initialized before the first forward (`early`) and how many layers were initialized again, for the
static caches `generate` makes and for the ones passed in.
The driver (`python -m oracle`) runs this module once per tree with `PYTHONPATH` set to the tree.
"""

import argparse
import dataclasses
import functools
import hashlib
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import torch

import transformers
import transformers.cache_utils as cache_utils
from oracle.compare import CACHES
from transformers import StaticCache
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


PER_MODEL_TIMEOUT = 120  # s
MAX_PARAMS = 60_000_000

NEW_LAYERS = 2
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, MAXPOS = 64, 4, 2, 16, 64, 99, 128

# field name -> value, applied to any config (text or sub-config) that declares the field
SIZE_OVERRIDES = {
    # layers (handled separately, with per-layer lists)
    # widths
    "hidden_size": HIDDEN,
    "n_embd": HIDDEN,
    "n_embed": HIDDEN,
    "d_model": HIDDEN,
    "word_embed_proj_dim": HIDDEN,
    "embedding_size": HIDDEN,
    "emb_dim": HIDDEN,
    "embedding_dim": HIDDEN,
    "lru_width": HIDDEN,
    "attention_hidden_size": HIDDEN,
    "input_embedding_size": HIDDEN,
    "output_embedding_size": HIDDEN,
    "hidden_size_per_layer_input": 16,
    "cross_attention_hidden_size": None,
    # heads
    "num_attention_heads": HEADS,
    "n_head": HEADS,
    "n_heads": HEADS,
    "num_heads": HEADS,
    "decoder_attention_heads": HEADS,
    "encoder_attention_heads": HEADS,
    "attention_heads": HEADS,
    "num_encoder_attention_heads": HEADS,
    "num_decoder_attention_heads": HEADS,
    "swa_num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "num_kv_heads": KV_HEADS,
    "swa_num_key_value_heads": KV_HEADS,
    # head dims (only when the default is not None, see below)
    "head_dim": HEAD_DIM,
    "kv_channels": HEAD_DIM,
    "swa_head_dim": HEAD_DIM,
    "attention_head_dim": HEAD_DIM,
    "dim_head": HEAD_DIM,
    "d_head": HEAD_DIM,
    "attention_head_size": HEAD_DIM,
    # ffn
    "intermediate_size": INTER,
    "ffn_dim": INTER,
    "d_ff": INTER,
    "dim_ff": INTER,
    "dff": INTER,
    "d_inner": INTER,
    "decoder_ffn_dim": INTER,
    "encoder_ffn_dim": INTER,
    "ffn_hidden_size": INTER,
    "feed_forward_size": INTER,
    "intermediate_size_mlp": INTER,
    "dense_intermediate_size": INTER,
    "prefix_dense_intermediate_size": INTER,
    "n_inner": INTER,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "shared_intermediate_size": 32,
    "shared_experts_intermediate_size": 32,
    "moe_shared_expert_intermediate_size": 32,
    "expert_ffn_hidden_size": 32,
    # vocab and positions
    "vocab_size": VOCAB,
    # the output size of heads whose checkpoint embedding is padded (Inkling 2)
    "unpadded_vocab_size": VOCAB,
    "max_position_embeddings": MAXPOS,
    "n_positions": MAXPOS,
    "n_ctx": MAXPOS,
    "max_target_positions": MAXPOS,
    "max_seq_len": MAXPOS,
    # MoE
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_topk": 2,
    "top_k_experts": 2,
    "moe_k": 2,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    # MLA
    "q_lora_rank": 16,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "index_head_dim": 16,
    "index_n_heads": 2,
    "index_topk": 4,
    # linear attention / SSM
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_head_dim": 16,
    "linear_num_heads": 4,
    "mamba_d_state": 8,
    "state_size": 8,
    "ssm_state_size": 8,
    # attention window
    "sliding_window": 4,
    # padding
    "pad_token_id": 0,
}
# fields set only when their default is not None (None means "derived")
ONLY_IF_NOT_NONE = {
    "kv_channels",
    "swa_head_dim",
    "attention_head_dim",
    "dim_head",
    "d_head",
    "attention_head_size",
    "q_lora_rank",
    "sliding_window",
    "n_inner",
    "cross_attention_hidden_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "hidden_size_per_layer_input",
    "linear_head_dim",
    "index_topk",
    "n_ctx",
    "max_seq_len",
    "first_k_dense_replace",
}
# per model type: constructor kwargs applied after the generic ones (to the text config for composite configs)
SPECIAL = {
    "codegen": {"rotary_dim": 8},
    "gptj": {"rotary_dim": 8},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1},
    "bamba": {"attn_layer_indices": [1]},
    "recurrent_gemma": {"num_hidden_layers": 3},
    # The input, recurrent and output sections must add up to the layers (the defaults are 8 + rest + 8)
    "dory": {
        "num_hidden_layers": 4,
        "n_input_layers": 1,
        "n_recurrent_layers": 2,
        "n_output_layers": 1,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
    },
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    "gemma3n_text": {"num_kv_shared_layers": 0},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    "mamba2": {"num_heads": 8},
    "zaya": {"num_experts_per_tok": 1},
    "gemma4_assistant": {"hidden_size_per_layer_input": 0},
    "dots1": {"n_shared_experts": 1},
    "xlstm": {"qk_dim_factor": 1.0},
    "reformer": {"is_decoder": True, "axial_pos_embds_dim": [32, 32]},
    "zamba": {"num_hidden_layers": 3, "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
    # KV sharing: the second indexed layer reads the first one's keys and values (the layout must stay consistent)
    "kolibri1_1": {
        "num_hidden_layers": 3,
        "layer_types": ["sliding_attention", "indexed_attention", "indexed_attention"],
        "kv_source_layers": [0, 1, 1],
        "index_layers": [1],
        "mlp_only_layers": [0],
        "head_dim": 16,
        "index_num_heads": 1,
    },
    "qwen4_exp": {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 16,
        "indexer_budget": 4,
        "indexer_compress_ratio": 2,
    },
    "qwen4_exp_text": {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": 16,
        "indexer_budget": 4,
        "indexer_compress_ratio": 2,
    },
}
# gemma4 family: full-attention layers get their own (larger) head dim, kept (heterogeneous head dims)
for _mt in (
    "gemma4",
    "gemma4_text",
    "gemma4_unified",
    "gemma4_unified_text",
    "gemma4_unified_assistant",
    "gemma4_assistant",
):
    SPECIAL.setdefault(_mt, {})["global_head_dim"] = 32
LAYER_FIELDS = [
    "num_hidden_layers",
    "num_layers",
    "n_layer",
    "n_layers",
    "decoder_layers",
    "encoder_layers",
    "num_decoder_layers",
    "num_encoder_layers",
]
PER_LAYER_TYPE_FIELDS = [
    "layer_types",
    "layers_block_type",
    "block_types",
    "attn_layers",
    "attention_types",
    "hybrid_override_pattern",
    "mlp_layer_types",
]


def getattr_safe(obj, name, default=None):
    try:
        return getattr(obj, name, default)
    except Exception:  # noqa: BLE001  (e.g. per-layer attributes of heterogeneous configs)
        return default


def declared_fields(cls):
    out = {}
    for f in dataclasses.fields(cls):
        out[f.name] = f
    return out


def select_layers(default_cfg, n):
    """Indices of the layers to keep: the first layer of each distinct layer type, at least NEW_LAYERS."""
    keep = []
    for name in PER_LAYER_TYPE_FIELDS:
        v = getattr_safe(default_cfg, name, None)
        if isinstance(v, (list, tuple, str)) and len(v) == n:
            seen = {}
            for i, t in enumerate(v):
                key = str(t)
                if key not in seen:
                    seen[key] = i
            keep.extend(seen.values())
    keep = sorted(set(keep))
    i = 0
    while len(keep) < min(NEW_LAYERS, n):
        if i not in keep:
            keep.append(i)
        i += 1
    return sorted(keep)


def shrink_kwargs(cfg_cls, default_cfg):
    """Constructor kwargs that make a tiny version of `default_cfg` (an instance of `cfg_cls`)."""
    fields = declared_fields(cfg_cls)
    kw = {}
    for name, value in SIZE_OVERRIDES.items():
        if name not in fields:
            continue
        current = getattr_safe(default_cfg, name, None)
        if name in ONLY_IF_NOT_NONE and current is None:
            continue
        if value is None:
            continue
        if isinstance(current, bool):
            continue
        if name in ("n_group", "topk_group") and current is None:
            continue
        if name in ("sliding_window",) and not isinstance(current, int):
            continue
        if name in ("first_k_dense_replace",) and isinstance(current, int) and current == 0:
            continue
        if "qk_rope_head_dim" in fields and name in ("head_dim", "num_key_value_heads"):
            # MLA: the rope head dim is `head_dim` for some models, and the keys have all the heads
            value = SIZE_OVERRIDES["qk_rope_head_dim"] if name == "head_dim" else HEADS
        kw[name] = value
    # layers
    n = None
    for name in LAYER_FIELDS:
        if name in fields and isinstance(getattr_safe(default_cfg, name, None), int):
            n = n or getattr_safe(default_cfg, name)
    if n is not None and n > NEW_LAYERS:
        keep = select_layers(default_cfg, n)
        for name in LAYER_FIELDS:
            if name in fields and isinstance(getattr_safe(default_cfg, name, None), int):
                kw[name] = (
                    len(keep)
                    if getattr_safe(default_cfg, name) == n
                    else min(getattr_safe(default_cfg, name), NEW_LAYERS)
                )
        for name in fields:
            v = getattr_safe(default_cfg, name, None)
            if isinstance(v, (list, tuple, str)) and len(v) == n and name not in kw and not name.endswith("_token"):
                if isinstance(v, str):
                    if name in PER_LAYER_TYPE_FIELDS:
                        kw[name] = "".join(v[i] for i in keep)
                else:
                    kw[name] = type(v)(v[i] for i in keep)
    return kw


def sub_config_names(cfg_cls, cfg):
    names = []
    for name in getattr(cfg_cls, "sub_configs", {}) or {}:
        if isinstance(getattr(cfg, name, None), transformers.PreTrainedConfig):
            names.append(name)
    return names


def text_config_of(cfg):
    try:
        return cfg.get_text_config()
    except ValueError:
        return cfg.get_text_config(decoder=True)


def build_config(model_type, shrink_subconfigs=True, base_dicts=True, overrides=None):
    """A tiny config of `model_type` and its constructor kwargs; `overrides` are set on the text config (those of
    its fields the text config class declares), after the per-model `SPECIAL` ones."""
    cfg_cls = CONFIG_MAPPING[model_type]
    default = cfg_cls()
    kw = shrink_kwargs(cfg_cls, default)
    text_default = text_config_of(default)
    declared = declared_fields(type(text_default))
    special = {**SPECIAL.get(model_type, {}), **{k: v for k, v in (overrides or {}).items() if k in declared}}
    if text_default is default:
        kw.update(special)
    for name in sub_config_names(cfg_cls, default):
        sub = getattr(default, name)
        is_text = sub is text_default
        if not (shrink_subconfigs or is_text):
            continue
        sub_kw = shrink_kwargs(type(sub), sub)
        for sub_name in sub_config_names(type(sub), sub):
            subsub = getattr(sub, sub_name)
            sub_kw[sub_name] = {**(subsub.to_dict() if base_dicts else {}), **shrink_kwargs(type(subsub), subsub)}
        if is_text:
            sub_kw.update(special)
        d = sub.to_dict() if base_dicts else {}
        # per-layer overrides are keyed by the indices of the default (deep) config
        d.pop("per_layer_config", None)
        d.update(sub_kw)
        kw[name] = d
    config = cfg_cls(**kw)
    return config, kw


def make_inputs():
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(3, VOCAB, (2, 6), generator=g)
    mask = torch.ones(2, 6, dtype=torch.long)
    ids[0, :2] = 0
    mask[0, :2] = 0
    return ids, mask


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout(f"model took more than {PER_MODEL_TIMEOUT}s")


# --- re-initialization counting (--wrap only) ---
STATE = {"forward_calls": 0, "records": [], "depth": 0}


def _patch_lazy_init(cls):
    if "lazy_initialization" not in cls.__dict__ or getattr(cls.__dict__["lazy_initialization"], "_oracle", False):
        return
    orig = cls.__dict__["lazy_initialization"]

    @functools.wraps(orig)
    def lazy_initialization(self, *args, **kwargs):
        # only (key_states, value_states) calls initialize the static attention part
        is_kv = len(args) == 2 and not kwargs
        was = bool(getattr(self, "is_initialized", False))
        STATE["depth"] += 1
        n_before = len(STATE["records"])
        try:
            return orig(self, *args, **kwargs)
        finally:
            STATE["depth"] -= 1
            # a subclass's method that went through StaticLayer's already recorded the call
            if is_kv and len(STATE["records"]) == n_before:
                STATE["records"].append(
                    {
                        "cls": type(self).__name__,
                        "was_initialized": was,
                        "forward_calls_before": STATE["forward_calls"],
                        "key_shape": tuple(args[0].shape),
                        "value_shape": tuple(args[1].shape),
                    }
                )

    lazy_initialization._oracle = True
    setattr(cls, "lazy_initialization", lazy_initialization)


def patch_static_layers():
    todo = [cache_utils.StaticLayer]
    while todo:
        cls = todo.pop()
        _patch_lazy_init(cls)
        todo.extend(cls.__subclasses__())


def weights_digest(model):
    h = hashlib.sha1()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def tree_digest(src):
    """sha1 over all .py files of the imported transformers tree (paths and contents)."""
    h = hashlib.sha1()
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(root, f)
                h.update(os.path.relpath(path, src).encode())
                with open(path, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def err(e):
    """The error's type and whole message, with those of its cause (a validation error says what failed there)."""
    message = " | ".join(line.strip() for line in str(e).strip().splitlines())[:2000]
    if e.__cause__ is not None:
        message += f" (cause: {type(e.__cause__).__name__}: {str(e.__cause__).strip()[:1000]})"
    return {"error_type": type(e).__name__, "error": message}


def build_model(model_type, class_name, entry, overrides=None):
    """A tiny random model of `model_type` (float32, eval mode), or None after recording in `entry["build"]` why it
    cannot be built. The first config strategy that builds wins (deterministic, the same on both trees when their
    config and modeling code agree); `entry` gets the strategy and parameter count, and the errors of the others."""
    model_cls = getattr(transformers, class_name)
    config = None
    for strategy in ("all_subconfigs", "all_subconfigs_no_base", "text_only", "text_config_model"):
        try:
            config, kw = build_config(
                model_type,
                shrink_subconfigs=(strategy != "text_only"),
                base_dicts=(strategy != "all_subconfigs_no_base"),
                overrides=overrides,
            )
            if strategy == "text_config_model":
                config = text_config_of(config)
            with torch.device("meta"):
                m = model_cls(config)
            n_params = sum(p.numel() for p in m.parameters())
            del m
            if n_params > MAX_PARAMS:
                raise RuntimeError(f"too many parameters: {n_params}")
            entry["strategy"] = strategy
            entry["n_params"] = n_params
            break
        except Timeout:
            raise
        except Exception as e:  # noqa: BLE001
            entry.setdefault("build_errors", []).append(
                {"strategy": strategy, **err(e), "tb": traceback.format_exc().strip().splitlines()[-4:]}
            )
            config = None
    if config is None:
        entry["build"] = entry["build_errors"][-1]
        return None
    try:
        torch.manual_seed(0)
        return model_cls(config).to(torch.float32).eval()
    except Exception as e:  # noqa: BLE001
        entry["build"] = err(e)
        return None


def window_passed(cache) -> bool:
    """Whether a static sliding window (or chunked) layer of `cache` holds more tokens than its window, on either
    tree (the fork's layers are a ring buffer then: its keys reach the attention in another order)."""
    layers = getattr(cache, "layers", [])
    return any(
        isinstance(layer, cache_utils.StaticSlidingWindowLayer)
        and layer.is_initialized
        and int(layer.get_seq_length()) > layer.max_cache_len
        for layer in layers
    )


def run_model(model_type, class_name, wrap):
    entry = {"class": class_name}
    model = build_model(model_type, class_name, entry)
    if model is None:
        return entry
    config = model.config
    if hasattr(model, "set_default_language"):
        model.set_default_language(getattr(config, "default_language", None) or config.languages[0])
    entry["weights"] = weights_digest(model)
    entry["text_config"] = {
        k: getattr_safe(text_config_of(config), k, None)
        for k in (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "layer_types",
            "sliding_window",
            "vocab_size",
        )
    }
    ids, mask = make_inputs()
    if wrap:
        orig_forward = model.forward

        @functools.wraps(orig_forward)
        def forward(*args, **kwargs):
            STATE["forward_calls"] += 1
            return orig_forward(*args, **kwargs)

        model.forward = forward
        patch_static_layers()  # layer classes of modeling files imported by now
    for cache in CACHES:
        STATE["forward_calls"] = 0
        STATE["records"] = []
        res = {}
        t0 = time.perf_counter()
        kwargs = {
            "max_new_tokens": 6,
            "do_sample": False,
            "num_beams": 1,
            "eos_token_id": None,
            "pad_token_id": 0,
            "output_scores": True,
            "return_dict_in_generate": True,
        }
        try:
            with torch.no_grad():
                if cache == "passed":
                    # A static cache the user passes in and resets between two calls (the explicit way to decode
                    # into the same tensors call after call): both calls' outputs are compared
                    passed = StaticCache(config=model.config, max_cache_len=ids.shape[1] + 6)
                    outs = []
                    for _ in range(2):
                        passed.reset()
                        outs.append(model.generate(ids.clone(), attention_mask=mask.clone(), cache=passed, **kwargs))
                    res["sequences"] = torch.cat([out.sequences.detach() for out in outs])
                    res["scores"] = torch.cat([torch.stack([s.detach().float() for s in out.scores]) for out in outs])
                    res["window_passed"] = window_passed(passed)
                else:
                    implementation = "static" if cache == "static" else None
                    out = model.generate(
                        ids.clone(), attention_mask=mask.clone(), cache_implementation=implementation, **kwargs
                    )
                    res["sequences"] = out.sequences.detach().clone()
                    res["scores"] = torch.stack([s.detach().float() for s in out.scores]).clone()
                    res["window_passed"] = window_passed(out.get("cache"))
        except Timeout:
            raise
        except Exception as e:  # noqa: BLE001
            res.update(err(e))
            res["traceback_tail"] = traceback.format_exc().strip().splitlines()[-6:]
        res["seconds"] = round(time.perf_counter() - t0, 3)
        if wrap:
            recs = STATE["records"]
            res["lazy_init_records"] = recs
            res["forward_calls"] = STATE["forward_calls"]
            res["early"] = any(r["forward_calls_before"] == 0 for r in recs)
            res["reinitialized"] = sum(r["was_initialized"] for r in recs)
        entry[cache] = res
    return entry


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m oracle.matrix", description=__doc__.splitlines()[0])
    parser.add_argument("--tree", required=True, help="the tree's name in the report")
    parser.add_argument("--out", required=True, type=Path, help="where to save the results (torch.save)")
    parser.add_argument("--wrap", action="store_true", help="replace each model's forward by a wrapper first")
    parser.add_argument("--only", default=None, help="comma-separated model types (default: every mapped one)")
    args = parser.parse_args(argv)
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    only = args.only.split(",") if args.only else None
    results = {
        "tree": args.tree,
        "transformers_file": transformers.__file__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "wrap": args.wrap,
        "models": {},
    }
    src = os.path.dirname(transformers.__file__)
    results["tree_digest_start"] = tree_digest(src)
    print(f"[{args.tree}] transformers from {transformers.__file__}, wrap={args.wrap}", flush=True)
    signal.signal(signal.SIGALRM, _alarm)
    unknown = sorted(set(only or ()) - set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES))
    if unknown:
        parser.error(f"--only: not causal-LM model types of this tree: {', '.join(unknown)}")
    items = [(k, v) for k, v in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items() if not only or k in only]
    t_all = time.perf_counter()
    for i, (model_type, class_name) in enumerate(items):
        t0 = time.perf_counter()
        signal.alarm(PER_MODEL_TIMEOUT)
        try:
            entry = run_model(model_type, class_name, args.wrap)
        except Exception as e:  # noqa: BLE001
            entry = {"class": class_name, "build": err(e)}
        finally:
            signal.alarm(0)
        entry["seconds"] = round(time.perf_counter() - t0, 2)
        results["models"][model_type] = entry
        status = []
        if "build" in entry:
            status.append(f"BUILD {entry['build']['error_type']}: {entry['build']['error'][:120]}")
        for cache in CACHES:
            r = entry.get(cache)
            if r is None:
                continue
            s = "ok" if "sequences" in r else f"{r['error_type']}: {r['error'][:100]}"
            if args.wrap:
                s += f" early={r['early']} reinit={r['reinitialized']}"
            status.append(f"{cache}={s}")
        print(f"{i + 1}/{len(items)} {model_type} ({entry['seconds']}s) " + " | ".join(status), flush=True)
    results["total_seconds"] = round(time.perf_counter() - t_all, 1)
    results["tree_digest_end"] = tree_digest(src)
    if results["tree_digest_end"] != results["tree_digest_start"]:
        print("WARNING: the transformers tree changed on disk during the run", flush=True)
    torch.save(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
