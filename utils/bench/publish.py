"""`python -m bench.publish [RUN]` (`make bench-publish`): a run's figures into docs/ and the README, by the bench.

Copies `results.json` and `decode.png` of a run folder (default: the latest under bench-out/) to
`docs/bench-results.json` and `docs/bench-decode.png`, then rewrites the README's generated blocks from
`docs/bench-results.json`: the headline on its first screen (`<!-- bench:headline -->` ... `<!-- /bench:headline -->`)
and the benchmark's table (`<!-- bench:table -->` ... `<!-- /bench:table -->`). `--check` changes nothing and exits 1
when the blocks differ from what `docs/bench-results.json` gives (a test runs the same comparison), so the README
cannot drift from the published run by hand.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import sys
from pathlib import Path

from forktool.common import ROOT

from .report import SCHEMA_VERSION, SIDES, _fmt, _number, contradicted, stall_counts


RESULTS = Path("docs") / "bench-results.json"
PLOT = Path("docs") / "bench-decode.png"
MODEL_NAMES = {
    "gpt2": "GPT2",
    "llama": "Llama",
    "gemma2": "Gemma 2 (sliding window 4)",
    "gemma3": "Gemma 3 multimodal (sliding window 4, an image in the prompt)",
    "llama16": "Llama of 16 layers",
    "llama135m": "Llama of SmolLM2-135M's shape",
}
# The decoding configurations beside the greedy one (`bench.scenarios.DECODE_CONFIGS`), as the headline names them
CONFIG_LABELS = {
    "eos": "with an eos token and `min_new_tokens`",
    "sampling": "sampling (temperature, top-k, top-p, repetition penalty; eos token, `min_new_tokens`)",
}
# The decoding configurations of the compiled decoding step's rows (`report.decoding_step_summary`)
STEP_LABELS = {"greedy": "greedy", **CONFIG_LABELS}
# The compile paths users are taught (`bench.scenarios.DECODE_PATHS`), the headline's first rows
PATH_LABELS = {
    "compile_config": "generate's own compile (`CompileConfig()`, `dynamic=None`)",
    "recipe": 'the recipe of the docs (`torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)`)',
}


class PublishError(Exception):
    """Reported as one line, exit status 2."""


def _x(ratio) -> str:
    return f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else "-"


def _num(value, digits: int = 3) -> str:
    """A figure with `digits` decimals below 10 (ms), one decimal above (s)."""
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value:.{digits}f}" if abs(value) < 10 else f"{value:.1f}"


def _ok(entry: dict | None) -> bool:
    return bool(entry) and all(entry.get(side, {}).get("status") == "ok" for side in SIDES)


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def describe_run(results: dict) -> str:
    """`2026-12-01 14:28, 4 min 6 s, 2 CPU cores, load average 2.9 at the start and 3.9 at the end, torch 2.13.0,
    5 runs per tree and 1 rerun after stalls`"""
    env = results.get("environment", {})
    load = env.get("load_average")
    reruns = sum(1 for run in results.get("runs", []) if run.get("rerun"))
    created = results.get("created", "?")
    try:
        started = datetime.datetime.fromisoformat(created) - datetime.timedelta(seconds=results["wall_s"])
        parts = [started.strftime("%Y-%m-%d %H:%M"), _duration(results["wall_s"])]
    except (KeyError, TypeError, ValueError):
        parts = [created[:16].replace("T", " ")]
    parts.append(f"{env.get('cpu_count', '?')} CPU cores" if results.get("device") == "cpu" else results.get("device"))
    if load:
        parts.append(f"load average {load['start']:.1f} at the start and {load['end']:.1f} at the end")
    parts.append(f"torch {env.get('torch', '?')}")
    reps = results.get("reps", "?")
    runs = f"{reps} run{'' if reps == 1 else 's'} per tree"
    if reruns:
        runs += f" and {reruns} rerun{'' if reruns == 1 else 's'} after stalls"
    parts.append(runs)
    if results.get("long"):
        parts.append("`--long`")
    return ", ".join(parts)


def _upstream_version(results: dict) -> str:
    return results.get("trees", {}).get("upstream", {}).get("transformers_version", "?")


def _name(model: str) -> str:
    """`GPT2`, or `GPT2, eos` for a model's other decoding configuration (`<model> <configuration>`)."""
    base, _, config_name = model.partition(" ")
    return MODEL_NAMES.get(base, base) + (f", {config_name}" if config_name else "")


def _listed(names: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)


def lines_for_depth(decode: dict, steps: dict, model: str) -> str:
    """The paragraph under the headline's table on a deep model (`llama16`): the compiled step's host time per token
    (`generate` minus its compiled calls) beside the 2-layer Llama's, and the step against pristine's `CompileConfig()`
    and the hand-written loop there."""
    deep, shallow = decode.get(f"{model} decoding_step", {}), decode.get("llama decoding_step", {})
    if not (_ok_fork(deep) and _ok_fork(shallow)):
        return ""
    host = {name: entry["fork"].get("host_ms_per_token_floor") for name, entry in (("2", shallow), ("16", deep))}
    figures = steps[f"{model} greedy"]
    versus = [
        f"{_x(figures[key]['floor'])} {label}"
        for key, label in (
            ("step_vs_pristine", "of pristine's `CompileConfig()`"),
            ("step_vs_handwritten", "of the hand-written loop"),
        )
        if figures.get(key)
    ]
    ratio = host["16"] / host["2"] if host["2"] and host["16"] else None
    return (
        f"\nWith 16 layers (a tiny Llama, greedy), the compiled step's host time per token (`generate` minus its compiled "
        f"calls) is {_num(host['16'])} ms, against {_num(host['2'])} ms with 2 layers (**{_x(ratio)}**), and its time "
        f"per token {' and '.join(versus)}."
    )


def lines_for_size(decode: dict, results: dict, model: str = "llama135m") -> str:
    """The paragraph under the headline's table on the model of a size users run (`bench.scenarios.SIZE_MODELS`):
    time per token of pristine's `CompileConfig()`, the fork's, and the compiled step, from each tree's first run."""
    regular, step = decode.get(f"{model} compile_config", {}), decode.get(f"{model} decoding_step", {})
    if not (_ok(regular) and _ok_fork(step)):
        return ""
    shape = (results.get("model_shapes") or {}).get(model, {})
    up, fork = regular["upstream"].get("ms_per_token_floor"), regular["fork"].get("ms_per_token_floor")
    now = step["fork"].get("ms_per_token_floor")
    hosts = [entry.get("host_ms_per_token_floor") for entry in (regular["upstream"], step["fork"])]
    ratio = now / up if up and now else None
    saved = (hosts[0] - hosts[1]) / up if up and all(_number(h) for h in hosts) else None
    return (
        f"\nAt a size users run on CPU, a Llama of SmolLM2-135M's shape ({shape.get('layers', '?')} layers, hidden "
        f"{shape.get('hidden_size', '?')}, random weights; one run per tree, so no verdict), time per token: "
        f"pristine's `CompileConfig()` {_num(up)} ms, the fork's {_num(fork)} ms, the compiled step {_num(now)} ms "
        f"(**{_x(ratio)}** of pristine's). There the forward's kernels take almost all of a token's time: the host's "
        f"work around them is {_num(hosts[0])} ms per token in pristine's loop and {_num(hosts[1])} ms with the step, "
        f"so what the step saves on the host is {100 * saved:.1f}% of a token, within what a single run's kernels vary. "
        "The tiny models above, where the host's work is most of a token, show the regime of a GPU running a small "
        "model, where kernels are fast (unmeasured until a GPU runs `make bench-gpu`)."
        if saved is not None
        else ""
    )


def _plural(count, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _short_error(status: str) -> str:
    """An error's first line without the paths of the files it names (a generated kernel's differs by run)."""
    return re.sub(r"\S*/\S+:\d+", "<file>", status)


def lines_for_speculative(results: dict, model: str = "llama") -> str:
    """The paragraph under the headline's table on speculative decoding (`report.speculative_summary`): per method,
    time per token pristine -> fork (or the error), the main model's forwards, the shapes of its verification
    forward, the graphs compiled; beside the call without speculation and the fork's compiled decoding step."""
    summary = results.get("speculative") or {}
    figures = {
        method: summary.get(f"{model} speculative {method}") for method in ("none", "assistant", "prompt_lookup")
    }
    step = (summary.get(f"{model} speculative decoding_step") or {}).get("fork", {})
    if not all(figures.values()) or not _ok(figures["none"]):
        return ""

    def side(entry: dict) -> str:
        if entry["status"] != "ok":
            return f"`{_short_error(entry['status'])}`"
        return f"{_num(entry['ms_per_token']['floor'])} ms"

    def method(name: str, label: str) -> str:
        entry = figures[name]
        fork = entry["fork"]
        found = entry.get("ratio")
        ratio = (
            f" (**{_x(found['floor'])}**; medians {_x(found['median'])} [{_x(found['range'][0])}-{_x(found['range'][1])}])"
            if found
            else ""
        )
        text = f"{label}: {side(entry['upstream'])} -> {side(fork)}{ratio}"
        if fork["status"] == "ok":
            text += (
                f"; the fork's main model ran {fork['forward_calls']} forwards, its verification forward took "
                f"{_plural(fork['decode_mask_shapes'], 'shape')}, {_plural(fork['graphs'], 'graph')} compiled"
                f"{'' if fork['graphs'] == fork['graphs_first_call'] else ' (some after the first call)'}, "
                f"{'the tokens of greedy `generate`' if fork['same_tokens'] else 'OTHER TOKENS than greedy `generate`'}"
            )
        return text

    none, assistant, lookup = figures["none"], figures["assistant"], figures["prompt_lookup"]
    draft = (assistant.get("fork") or {}).get("draft_tokens") or "?"
    candidates = (lookup.get("fork") or {}).get("draft_tokens") or "?"
    tokens = none["fork"].get("new_tokens") or "?"
    counts = {(results.get("decode", {}).get(f"{model} speculative none", {}).get(s) or {}).get("runs") for s in SIDES}
    runs = f"{counts.pop()} runs per tree" if len(counts) == 1 and None not in counts else "runs per tree as above"
    step_text = f", and the fork's compiled decoding step {side(step)}" if step.get("status") == "ok" else ""
    # with every candidate accepted, each verification gives the drafted tokens and one more
    forwards = (assistant.get("fork") or {}).get("forward_calls")
    every = isinstance(draft, int) and isinstance(tokens, int) and forwards == -(-tokens // (draft + 1))
    accepted = "every one accepted" if every else f"{forwards} verifications: not every one accepted"
    with_assistant = method(
        "assistant", f"an assistant with the main model's weights drafting {draft} tokens a step ({accepted})"
    )
    with_lookup = method("prompt_lookup", f"prompt lookup ({candidates} candidates at most)")
    one_shape = all(
        _ok_fork(figures[name]) and figures[name]["fork"]["decode_mask_shapes"] == 1
        for name in ("assistant", "prompt_lookup")
    )
    shapes = (
        "The fork verifies a fixed number of positions (the candidates padded to the most drafted): one shape."
        if one_shape
        else "The verification forward's length changes from step to step (a new shape: a graph, or a `SymInt` input "
        "that CUDA graphs record once per value)."
    )
    return (
        f"\nSpeculative decoding (a tiny Llama, batch 1, greedy, {tokens} tokens, a static cache and generate's "
        f"`CompileConfig()`, a prompt that repeats itself; {runs}), time per token by the floor, pristine -> the "
        f"fork: {with_assistant}; {with_lookup}; beside them the same call without speculation "
        f"{side(none['upstream'])} -> {side(none['fork'])}{step_text}. {shapes}"
    )


def _ok_fork(entry: dict | None) -> bool:
    return bool(entry) and entry.get("fork", {}).get("status") == "ok"


def render_headline(results: dict) -> str:
    """The README's first-screen block: per-token time, host time and compile cost, pristine vs fork."""
    decode, cost = results.get("decode", {}), results.get("compile_cost", {})
    # the columns: each model's greedy decoding; its other configurations and paths (`<model> <name>`) are rows
    models = [model for model in decode if " " not in model and _ok(decode[model])]
    lines = [
        f"**What the fork buys**, from the latest `make bench` ({describe_run(results)}): tiny "
        f"{_listed([MODEL_NAMES.get(m, m) for m in models])} on CPU, greedy `generate` of "
        f"{decode[models[0]]['upstream']['forward_calls'] if models else '?'} tokens with a static cache, "
        f"compiled as the docs teach and as the benchmark does, pristine {_upstream_version(results)} -> the fork:",
        "",
        "| | " + " | ".join(f"{MODEL_NAMES.get(m, m)}: pristine -> fork" for m in models) + " |",
        "|---|" + "---|" * len(models),
    ]

    def row(label: str, cells: list[str]) -> None:
        if any(cell != "-" for cell in cells):
            lines.append(f"| {label} | " + " | ".join(cells) + " |")

    def floor(model: str, key: str, unit: str) -> str:
        entry = decode.get(model)
        if not _ok(entry):
            return "-"
        up, fork = entry["upstream"].get(f"{key}_floor"), entry["fork"].get(f"{key}_floor")
        if up is None or fork is None:
            return "-"
        return f"{_num(up)} -> {_num(fork)} {unit} (**{_x(entry['ratio'].get(f'{key}_floor'))}**)"

    for path, label in PATH_LABELS.items():
        row(f"time per token, {label}", [floor(f"{m} {path}", "ms_per_token", "ms") for m in models])
    steps = results.get("decoding_step", {})

    def step(name: str, versus: str, before: str, median: bool = False) -> str:
        figures = steps.get(name) or {}
        ratio, was, now = figures.get(versus), figures.get(before), figures.get("decoding_step")
        if not ratio or not was or not now:
            return "-"
        medians = f"; medians {_x(ratio['median'])}" if median else ""
        return f"{_num(was['floor'])} -> {_num(now['floor'])} ms (**{_x(ratio['floor'])}**{medians})"

    for config_name, label in STEP_LABELS.items():
        row(
            f"time per token, the fork's compiled decoding step (`compile_decoding_step=True`) against "
            f"pristine's `CompileConfig()`, {label}",
            [step(f"{m} {config_name}", "step_vs_pristine", "pristine_compile_config") for m in models],
        )
    row(
        "time per token, the fork's compiled decoding step against a hand-written loop over the same compiled "
        "forward, greedy",
        [step(f"{m} greedy", "step_vs_handwritten", "handwritten", median=True) for m in models],
    )
    static = results.get("recompiles", {})

    def symint_values(model: str) -> str:
        entry = static.get(model, {}).get("static_cache_dynamic_none")
        if not _ok(entry) or any(entry[side].get("symint_values_of_decode_steps") is None for side in SIDES):
            return "-"
        return " -> ".join(str(entry[side]["symint_values_of_decode_steps"]) for side in SIDES) + (
            f" (of {entry['upstream']['decode_steps']} steps)"
        )

    row(
        "`SymInt` values the decoding graph takes with `dynamic=None`, one CUDA-graph recording each",
        [symint_values(m) for m in models],
    )
    row(
        "time per token, `torch.compile(model.forward, dynamic=False)`",
        [floor(m, "ms_per_token", "ms") for m in models],
    )
    row(
        "host time per token (`generate` around the compiled forward), `dynamic=False`",
        [floor(m, "host_ms_per_token", "ms") for m in models],
    )
    for config_name, label in CONFIG_LABELS.items():
        row(f"host time per token, {label}", [floor(f"{m} {config_name}", "host_ms_per_token", "ms") for m in models])
    row(
        "the compiled forward alone (the last decoding step replayed), `dynamic=False`",
        [floor(m, "forward_alone_ms", "ms") for m in models],
    )
    compile_cells = []
    for model in models:
        entry = cost.get(model)
        if not _ok(entry):
            compile_cells.append("-")
            continue
        up, fork = entry["upstream"]["first_generate_cpu_s"], entry["fork"]["first_generate_cpu_s"]
        compile_cells.append(f"{_num(up)} -> {_num(fork)} s ({_x(entry['ratio']['first_generate_cpu_s'])})")
    runs = {cost[m]["upstream"].get("runs") for m in models if _ok(cost.get(m))}
    count = f"{runs.pop()} per tree" if len(runs) == 1 else "per tree"
    row(f"first call, compiling (CPU time; cold compiles: {count})", compile_cells)

    first_calls = (results.get("first_call") or {}).get("models", {})

    def first_call(model: str, path: str) -> str:
        by_side = first_calls.get(model, {}).get(path, {})
        if "fork" not in by_side:
            return "-"
        kinds = ("cold", "warm", "warm_vec_isa_ok")
        cells = [
            " / ".join(_num(by_side[side][kind]["least"], 2) if kind in by_side[side] else "-" for kind in kinds)
            if side in by_side
            else "-"
            for side in SIDES
        ]
        return f"{cells[0]} -> {cells[1]} s"

    def processes(kind: str) -> str:
        counts = {
            figures[kind]["processes"]
            for paths in first_calls.values()
            for by_side in paths.values()
            for side, figures in by_side.items()
            if side in SIDES and kind in figures
        }
        return f"{counts.pop()} " if len(counts) == 1 else ""

    row(
        "first `generate` of a new process, cold / warm inductor cache / warm with `TORCHINDUCTOR_VEC_ISA_OK=1` "
        f"(wall; the least of each tree's and path's {processes('cold')}cold, {processes('warm')}warm and "
        f"{processes('warm_vec_isa_ok')}warm processes with the variable), "
        "`CompileConfig()`",
        [first_call(m, "compile_config") for m in models],
    )
    row(
        "first `generate` of a new process, cold / warm / warm with `TORCHINDUCTOR_VEC_ISA_OK=1`, the fork's compiled "
        "decoding step",
        [first_call(m, "decoding_step") for m in models],
    )
    for model in ("llama16",):
        if f"{model} greedy" in steps and (paragraph := lines_for_depth(decode, steps, model)):
            lines += ["", paragraph.strip()]
    if paragraph := lines_for_size(decode, results):
        lines += ["", paragraph.strip()]
    if paragraph := lines_for_speculative(results):
        lines += ["", paragraph.strip()]
    lines += [
        "",
        "Per-token figures are floors: each part of a call at its fastest over all the runs of a tree, which no "
        "stall of a busy machine moves ([how](utils/bench/README.md#how-it-measures)); absolute times depend on the "
        'machine and its load, compare the ratios. On CPU, `mode="reduce-overhead"` captures no CUDA graph: with '
        "`dynamic=None` (generate's own compile and the docs' recipe), past the window pristine compiles one graph "
        "whose `SymInt` input takes a new value at every decoding step, which CUDA graphs would record once each "
        "(the `SymInt` row); the fork's takes none. With `dynamic=False`, past its window pristine compiles a graph "
        "per decoding step until dynamo's recompile limit and runs the later steps uncompiled (its forward alone is "
        "that uncompiled step); the fork compiles one. Generate's own compile runs the prefill eagerly, as upstream "
        "does. The compiled decoding step is opt-in (`compile_decoding_step=True`); its calls are cut at each "
        "compiled step as the regular loop's are at each forward, so its floor is of the same kind as theirs; its row "
        "gives the ratio of "
        "the medians too. The compile's ratio, from one cold compile per tree unless "
        f"`make bench-long`, moves by several percent from run to run: the goals give it a verdict only from "
        f"{VERDICT_COMPILES} cold compiles per tree or more, whose ranges do not overlap. No GPU figure exists yet: `--device cuda` has "
        "not been run on a GPU.",
    ]
    return "\n".join(lines)


def _cell(entry: dict, key: str, floor: bool) -> str:
    """`floor; median [min-max]` of one decode timing of one side (without the floor where it has none)."""
    runs = _num(entry.get(key))
    low, high = entry.get(f"{key}_min"), entry.get(f"{key}_max")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low != high:
        runs += f" [{_num(low)}-{_num(high)}]"
    return f"**{_num(entry.get(f'{key}_floor'))}**; {runs}" if floor else runs


def _count(entry: dict, key: str) -> str:
    value, spread = entry.get(key), entry.get(f"{key}_range")
    if spread and spread[0] != spread[1]:
        return f"{_fmt(spread[0])}-{_fmt(spread[1])}"
    return _fmt(value)


def render_table(results: dict) -> str:
    """The benchmark's table in the README: decode floors and spreads, compile cost, counts and matrices."""
    decode, cost = results.get("decode", {}), results.get("compile_cost", {})
    lines = [
        f"`make bench`, {describe_run(results)}. Per-token times: **floor**; median [min-max] over the runs "
        "(each run: the median of its calls).",
        "",
        f"| | upstream {_upstream_version(results)} | fork | fork / upstream: floor (median) |",
        "|---|---|---|---|",
    ]

    def row(label: str, up: str, fork: str, ratio: str = "") -> None:
        lines.append(f"| {label} | {up} | {fork} | {ratio} |")

    for model, entry in decode.items():
        name = _name(model)
        if not _ok(entry):
            up, fork = (_short_error(entry[side].get("status", "-")) for side in SIDES)
            row(f"{name}: decode", up, fork)
            continue
        ratio, disagree = entry["ratio"], contradicted(entry)
        for key, label, floor in (
            ("ms_per_token", "ms per token", True),
            ("host_ms_per_token", "host ms per token (generate minus the compiled forward)", True),
            ("cpu_ms_per_token", "CPU ms per token (the process's CPU time)", False),
            ("forward_alone_ms", "compiled forward alone, ms (the limit)", True),
        ):
            # a median that says the opposite of the floor comes with both trees' stall counts
            median = _x(ratio.get(key)) + (f"; {stall_counts(entry)}" if key in disagree else "")
            shown = f"{_x(ratio.get(f'{key}_floor'))} ({median})" if floor else f"({median})"
            row(f"{name}: {label}", _cell(entry["upstream"], key, floor), _cell(entry["fork"], key, floor), shown)
    models = [model for model in cost if _ok(cost[model])]
    if models:
        names = " / ".join(MODEL_NAMES.get(m, m) for m in models)
        runs = " / ".join(str(cost[m]["upstream"]["runs"]) for m in models)
        for key, label in (
            ("first_generate_s", "wall"),
            ("first_generate_cpu_s", "CPU time of the process and its compilers"),
        ):
            cells = {side: " / ".join(_cell(cost[m][side], key, False) for m in models) for side in SIDES}
            ratios = " / ".join(f"{_x(cost[m]['ratio'][key])}" for m in models)
            row(
                f"first `generate` with a cold compile, {names}, s ({label}; {runs} per tree)",
                cells["upstream"],
                cells["fork"],
                f"({ratios})",
            )
        cells = {
            side: " / ".join(
                f"{_count(cost[m][side], 'generated_files')}, {cost[m][side]['generated_kb']:.0f}" for m in models
            )
            for side in SIDES
        }
        row(f"the code it makes inductor write, {names}: files, kB", cells["upstream"], cells["fork"])
    for model, sides in results.get("calls", {}).items():
        if _ok(sides):
            cells = {side: ", ".join(_num(v, 0) for v in sides[side]["call_ms"]) for side in SIDES}
            row(
                f"{len(sides['upstream']['call_ms'])} consecutive `generate` calls after a dynamo reset, {MODEL_NAMES.get(model, model)}, ms (medians)",
                cells["upstream"],
                cells["fork"],
            )
    models = [model for model in decode if " " not in model and _ok(decode[model])]
    if models:
        steps = decode[models[0]]["upstream"]["forward_calls"] - 1
        cells = {
            side: ", ".join(
                f"{_count(decode[m][side], 'decode_mask_shapes')} / {_count(decode[m][side], 'decode_mask_addresses')}"
                for m in models
            )
            for side in SIDES
        }
        row(
            f"decoding steps' mask tensors: shapes / distinct buffers ({' / '.join(MODEL_NAMES.get(m, m) for m in models)}, "
            f"{steps} steps; buffers vary by run where a range is shown)",
            cells["upstream"],
            cells["fork"],
        )
    static = results.get("recompiles", {})
    for config, keys, label in (
        ("static_cache", ("graphs", "graphs_after_first_decode_step", "graph_breaks"), "graphs / after the first "
         "decode step / graph breaks (`dynamic=False`)"),
        ("static_cache_dynamic_none", ("graphs", "symint_inputs_of_decode_graphs", "symint_values_of_decode_steps"),
         "graphs / `SymInt` inputs of the decoding graphs / their distinct values over the decoding steps, what CUDA "
         "graphs would record (`dynamic=None`, the default)"),
    ):  # fmt: skip
        models = [m for m in static if _ok(static[m].get(config))]
        if models:
            cells = {
                side: ", ".join(" / ".join(str(static[m][config][side].get(k, "-")) for k in keys) for m in models)
                for side in SIDES
            }
            names = " / ".join(MODEL_NAMES.get(m, m) for m in models)
            row(f"compiled decode, static cache, {names}: {label}", cells["upstream"], cells["fork"])
    tracing = results.get("tracing", {})
    cases = (
        ("compile_fullgraph_early_cache", "rank1_empty_graph_inputs"),
        ("export_strict", "rank1_empty_constants"),
        ("aot_export_joint_simple", "rank1_empty_constants"),
    )
    if all(case in tracing for case, _ in cases):
        cells = {
            side: " / ".join(
                _fmt(tracing[case][side].get(key))
                if tracing[case][side].get("status") == "ok"
                else tracing[case][side]["status"]
                for case, key in cases
            )
            for side in SIDES
        }
        row(
            "rank-1 `f32[0]` from an empty cache: `fullgraph` inputs / `torch.export` constants / `aot_export_joint_simple` constants",
            cells["upstream"],
            cells["fork"],
        )
    quantized = tracing.get("quantized_across_flushes")
    if _ok(quantized):
        cells = {
            side: f"{quantized[side]['rank_mismatch_recompiles']} of {quantized[side]['recompiles']}" for side in SIDES
        }
        row(
            "quantized cache compiled across flushes: recompiles caused by a rank mismatch",
            cells["upstream"],
            cells["fork"],
        )
    matrix = results.get("mask_matrix", {})
    upcast = ("self/eager+reorder_and_upcast_attn", "cross/eager+reorder_and_upcast_attn")
    if all(path in matrix for path in upcast):
        cells = {side: " / ".join(_fmt(matrix[path]["bool"][side]) for path in upcast) for side in SIDES}
        row(
            "GPT2 boolean 4-D mask, eager and upcast: max \\|Δ logits\\| self / cross",
            cells["upstream"],
            cells["fork"],
        )
    if matrix:
        cells = {}
        for side in SIDES:
            values = [kinds["static_length"][side] for kinds in matrix.values() if "static_length" in kinds]
            errors = sorted({v.split(":")[0] for v in values if isinstance(v, str)})
            cells[side] = ", ".join(f"`{e}`" for e in errors) if errors else _fmt(max(values, default=None))
        row(
            "GPT2 4-D mask longer than the keys, every path: max \\|Δ logits\\| or the error",
            cells["upstream"],
            cells["fork"],
        )
    goals = render_goals(results)
    return "\n".join(lines + ([""] + goals if goals else []))


# The project's goals for the published ratios, fork / upstream: (what, where, the decoding configuration or None
# for the greedy one, key, at most).
GOALS = (
    ("host time per token", "decode", None, "host_ms_per_token_floor", 0.30),
    ("host time per token with an eos token and `min_new_tokens`", "decode", "eos", "host_ms_per_token_floor", 0.45),
    ("time per token", "decode", None, "ms_per_token_floor", 0.7),
    ("first compile (CPU time)", "compile_cost", None, "first_generate_cpu_s", 1.0),
)
# The compiled decoding step's goals: per model and decoding configuration, at most this ratio of pristine's
# `CompileConfig()`, and greedy, of the hand-written loop; its host time per token with 16 layers at most this ratio of
# the 2-layer model's
STEP_GOALS = {"step_vs_pristine": 0.45, "step_vs_handwritten": 0.9}
# The models the step's goals are about (the 16-layer model has its own goal, the size model shows where gains vanish)
STEP_GOAL_MODELS = ("gpt2", "llama", "gemma2")
DEPTH_GOAL = 1.25
# A compile verdict needs this many cold compiles per tree, and the trees' ranges apart: one cold compile's ratio
# moves by several percent from run to run (`make bench-long` compiles cold in every run)
VERDICT_COMPILES = 3
# A new process's first `generate` with the compiled decoding step on a warm inductor cache: at most this many s
WARM_FIRST_CALL_S = 3.0


def _separated(entry: dict, key: str) -> bool:
    """Whether the sides' [min, max] of `key` over their runs do not overlap, from enough runs for a verdict."""
    up, fork = entry["upstream"], entry["fork"]
    if min(up.get("runs") or 0, fork.get("runs") or 0) < VERDICT_COMPILES:
        return False
    bounds = [up.get(f"{key}_min"), up.get(f"{key}_max"), fork.get(f"{key}_min"), fork.get(f"{key}_max")]
    if not all(_number(value) for value in bounds):
        return False
    up_min, up_max, fork_min, fork_max = bounds
    return fork_max < up_min or up_max < fork_min


def render_goals(results: dict) -> list[str]:
    """One sentence: each goal with the ratios of this run, met or not (a compile goal: only from enough cold
    compiles whose ranges separate the trees, else no verdict)."""
    parts = []
    for what, scenario, config_name, key, limit in GOALS:
        entries = {
            m: e
            for m, e in results.get(scenario, {}).items()
            if _ok(e) and " " not in m and (config_name is None or _ok(results[scenario].get(f"{m} {config_name}")))
        }
        if config_name is not None:
            entries = {m: results[scenario][f"{m} {config_name}"] for m in entries}
        ratios = {m: e["ratio"].get(key) for m, e in entries.items() if _number(e["ratio"].get(key))}
        if not ratios:
            continue
        shown = ", ".join(f"{MODEL_NAMES.get(m, m)} {r:.2f}x" for m, r in ratios.items())
        missed = [MODEL_NAMES.get(m, m) for m, r in ratios.items() if r > limit]
        verdict = "met" if not missed else f"not met by {_listed(missed)}"
        if scenario == "compile_cost" and not all(_separated(entries[m], key) for m in ratios):
            runs = min(min(e["upstream"].get("runs") or 0, e["fork"].get("runs") or 0) for e in entries.values())
            verdict = (
                f"no verdict ({runs} cold compile{'s' if runs != 1 else ''} per tree"
                + (f", fewer than {VERDICT_COMPILES}" if runs < VERDICT_COMPILES else ", ranges that overlap")
                + ")"
            )
        parts.append(f"{what} at most {limit:g}x upstream's: {shown}, {verdict}")
    steps = results.get("decoding_step") or {}
    for versus, limit in STEP_GOALS.items():
        ratios = {
            name: figures[versus]["floor"]
            for name, figures in steps.items()
            if (figures.get(versus) or {}).get("floor") is not None and name.split()[0] in STEP_GOAL_MODELS
        }
        if ratios:
            missed = [name for name, ratio in ratios.items() if ratio > limit]
            worst = max(ratios, key=ratios.get)
            against = "pristine's `CompileConfig()`" if versus == "step_vs_pristine" else "the hand-written loop"
            parts.append(
                f"the compiled step at most {limit:g}x {against} in every configuration: {len(ratios)} of them, the "
                f"highest {_x(ratios[worst])} ({worst}), {'met' if not missed else f'not met by {_listed(missed)}'}"
            )
    decode = results.get("decode", {})
    deep, shallow = decode.get("llama16 decoding_step", {}), decode.get("llama decoding_step", {})
    if _ok_fork(deep) and _ok_fork(shallow):
        host = [entry["fork"].get("host_ms_per_token_floor") for entry in (deep, shallow)]
        if all(_number(value) for value in host):
            ratio = host[0] / host[1]
            parts.append(
                f"the step's host time per token with 16 layers at most {DEPTH_GOAL:g}x the 2-layer model's: "
                f"{_x(ratio)}, {'met' if ratio <= DEPTH_GOAL else 'not met'}"
            )
    elif _ok_fork(shallow) and "llama16 decoding_step" not in decode:
        parts.append(
            f"the step's host time per token with 16 layers at most {DEPTH_GOAL:g}x the 2-layer model's: not "
            "measured by this run (`make bench-long` runs the 16-layer model)"
        )
    warm = {}
    for model, paths in ((results.get("first_call") or {}).get("models") or {}).items():
        figures = paths.get("decoding_step", {}).get("fork", {})
        if "warm" in figures and "warm_vec_isa_ok" in figures:
            warm[model] = (figures["warm"]["least"], figures["warm_vec_isa_ok"]["least"])
    if warm:
        shown = ", ".join(
            f"{MODEL_NAMES.get(m, m)} {plain:.2f} s ({isa_ok:.2f} s with `TORCHINDUCTOR_VEC_ISA_OK=1`)"
            for m, (plain, isa_ok) in warm.items()
        )
        missed = [MODEL_NAMES.get(m, m) for m, (plain, _) in warm.items() if plain > WARM_FIRST_CALL_S]
        missed_with = [MODEL_NAMES.get(m, m) for m, (_, isa_ok) in warm.items() if isa_ok > WARM_FIRST_CALL_S]
        if not missed:
            verdict = "met"
        elif not missed_with:
            verdict = f"not met by {_listed(missed)}, met with the variable set"
        else:
            verdict = f"not met by {_listed(missed)}, and with the variable set not by {_listed(missed_with)}"
        parts.append(
            f"a new process's first `generate` with the compiled decoding step, on a warm inductor cache, within "
            f"{WARM_FIRST_CALL_S:g} s: {shown}, {verdict}"
        )
    return [f"The project's goals: {'; '.join(parts)}."] if parts else []


BLOCKS = {"headline": render_headline, "table": render_table}
# The file each block is in: the headline on the README's first screen, the full table in the benchmark's page
BLOCK_FILES = {"headline": Path("README.md"), "table": Path("docs") / "bench.md"}


def replace_block(text: str, name: str, body: str) -> str:
    """`text` with the lines between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` replaced by `body`."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise PublishError(f"README.md needs one `{start}` line before one `{end}` line")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def block(text: str, name: str) -> str | None:
    """The body of the README's block `name`, or None without one."""
    start, end = f"<!-- bench:{name} -->\n", f"\n<!-- /bench:{name} -->"
    if start not in text or end not in text:
        return None
    return text.split(start, 1)[1].split(end, 1)[0]


def render_readme(text: str, results: dict, names=BLOCKS) -> str:
    """`text` with the blocks `names` (all by default) rendered from `results`."""
    for name in names:
        text = replace_block(text, name, BLOCKS[name](results))
    return text


def latest_run(root: Path = ROOT) -> Path:
    """The latest full run (not --quick) of `make bench` under bench-out/ (not `make bench-guards`' or `bench-host-ab`'s)."""
    for results in sorted((root / "bench-out").glob("*/results.json"), reverse=True):
        found = json.loads(results.read_text(encoding="utf-8"))
        if "schema_version" in found and not found.get("quick") and "decode" in found:
            return results.parent
    raise PublishError(f"no full run with a results.json under {root / 'bench-out'}: run `make bench` first")


def publish(run: Path, root: Path = ROOT) -> list[Path]:
    """Copies the run's results and plot into docs/ and rewrites the README's blocks; returns the paths written."""
    results_path = run / "results.json"
    if not results_path.is_file():
        raise PublishError(f"{results_path} does not exist")
    results = json.loads(results_path.read_text(encoding="utf-8"))
    if results.get("quick") or "decode" not in results:
        raise PublishError(f"{run} is a --quick run or ran no decode (--only): publish a full one")
    if results.get("schema_version") != SCHEMA_VERSION:
        raise PublishError(f"{results_path} has schema version {results.get('schema_version')}, not {SCHEMA_VERSION}")
    (root / "docs").mkdir(exist_ok=True)
    written = [root / RESULTS]
    shutil.copyfile(results_path, root / RESULTS)
    if results.get("plot"):
        shutil.copyfile(run / results["plot"], root / PLOT)
        written.append(root / PLOT)
    for path in sorted(set(BLOCK_FILES.values())):
        names = [name for name, where in BLOCK_FILES.items() if where == path]
        text = (root / path).read_text(encoding="utf-8")
        (root / path).write_text(render_readme(text, results, names), encoding="utf-8")
        written.append(root / path)
    return written


def out_of_sync(root: Path = ROOT) -> list[str]:
    """The README's blocks that differ from what `docs/bench-results.json` gives (missing ones included)."""
    results = json.loads((root / RESULTS).read_text(encoding="utf-8"))
    if results.get("schema_version") != SCHEMA_VERSION:
        raise PublishError(
            f"{RESULTS} has schema version {results.get('schema_version')}, not {SCHEMA_VERSION}: publish a run"
        )
    return [
        name
        for name, render in BLOCKS.items()
        if block((root / BLOCK_FILES[name]).read_text(encoding="utf-8"), name) != render(results)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.publish", description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", type=Path, help="a run folder (default: the latest under bench-out/)")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the README differs from docs/; write nothing"
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = out_of_sync()
            for name in stale:
                print(
                    f"bench.publish: {BLOCK_FILES[name]}'s `bench:{name}` block differs from {RESULTS}",
                    file=sys.stderr,
                )
            return 1 if stale else 0
        for path in publish((args.run or latest_run()).resolve()):
            print(f"bench: updated {path.relative_to(ROOT)}")
    except PublishError as e:
        print(f"bench.publish: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
