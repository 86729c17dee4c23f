"""Aggregates the sides' runs into `results.json`, prints the table and draws the plot (see README.md here)."""

from __future__ import annotations

import statistics
from pathlib import Path


SCHEMA_VERSION = 5
SIDES = ("upstream", "fork")
DECODE_TIMES = (
    "ms_per_token",
    "host_ms_per_token",
    "forward_ms_per_token",
    "cpu_ms_per_token",
    "host_cpu_ms_per_token",
    "prefill_forward_ms",
    "decode_forward_ms",
    "forward_alone_ms",
    "forward_alone_cpu_ms",
)
# The floors: what a stall cannot move (see `floors`); their ratios are the published ones.
FLOOR_TIMES = ("ms_per_token", "host_ms_per_token", "forward_ms_per_token", "forward_alone_ms")
DECODE_COUNTS = ("forward_calls", "decode_mask_shapes", "decode_mask_addresses", "cudagraph_recordings")
# Of the speculative decoding entries (`bench.scenarios.speculative`): graphs compiled by the first call and by all,
# whether the tokens are greedy `generate`'s without speculation; the tokens a step drafts, the tokens generated
SPECULATIVE_COUNTS = ("graphs_first_call", "graphs", "same_tokens", "draft_tokens", "new_tokens")
COMPILE_TIMES = ("first_generate_s", "first_generate_cpu_s", "first_forward_s")
COMPILE_COUNTS = ("graphs", "generated_files", "generated_kb")
SPREAD_LIMIT = 0.25  # a timing whose runs on one side spread by more, (max - min) / min, is warned about
STALL_FACTOR = 5.0  # a decode step slower than this many times its run's usual fast step is a stall
STALL_SHARE = 0.10  # a run whose stalls make up more than this share of its timed decode steps' time is stalled


def _ratio(fork, upstream):
    if isinstance(fork, (int, float)) and isinstance(upstream, (int, float)) and upstream:
        return fork / upstream
    return None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def with_min(keys: tuple[str, ...]) -> tuple[str, ...]:
    """Each timing key, then its minimum over the runs (`<key>_min`): the keys of a ratio."""
    return tuple(name for key in keys for name in (key, f"{key}_min"))


def with_spread(keys: tuple[str, ...]) -> tuple[str, ...]:
    """Each timing key (the median over the runs), then its minimum and maximum (`<key>_min`, `<key>_max`)."""
    return tuple(name for key in keys for name in (key, f"{key}_min", f"{key}_max"))


def _failure(entries: list[dict]) -> str | None:
    """The first error of the runs' entries of one side, or None when every run is ok."""
    return next((e["status"] for e in entries if e.get("status", "ok") != "ok"), None)


def _spread(values: list[float]) -> str | None:
    """`N% (a-b)` when the runs' values spread by more than SPREAD_LIMIT, (max - min) / min; else None."""
    numbers = [v for v in values if _number(v)]
    if len(numbers) < 2 or min(numbers) <= 0:
        return None
    low, high = min(numbers), max(numbers)
    if (high - low) / low <= SPREAD_LIMIT:
        return None
    return f"{100 * (high - low) / low:.0f}% ({_fmt(low)}-{_fmt(high)})"


def _warn_spread(where: str, spreads: list[str], warnings: list[str]) -> None:
    """One warning for all the timings of `where` whose runs spread: `<where>: runs spread by more than 25%: ...`."""
    if spreads:
        warnings.append(f"{where}: runs spread by more than {100 * SPREAD_LIMIT:.0f}%: {', '.join(spreads)}")


def _times(where: str, entries: list[dict], keys: tuple[str, ...], warnings: list[str]) -> dict:
    """Per key, the median over the runs' entries, their minimum and maximum; warns about spread runs."""
    summary, spreads = {}, []
    for key in keys:
        values = [e.get(key) for e in entries if _number(e.get(key))]
        summary[key] = statistics.median(values) if values else None
        summary[f"{key}_min"] = min(values) if values else None
        summary[f"{key}_max"] = max(values) if values else None
        spread = _spread(values)
        if spread:
            spreads.append(f"{key} {spread}")
    _warn_spread(where, spreads, warnings)
    return summary


def _counts(entries: list[dict], keys: tuple[str, ...]) -> dict:
    """Per count, the first run's, and `<key>_range` ([least, most] over the runs): some counts vary by run."""
    summary = {}
    for key in keys:
        values = [e.get(key) for e in entries if _number(e.get(key))]
        summary[key] = entries[0].get(key)
        summary[f"{key}_range"] = [min(values), max(values)] if values else None
    return summary


def _ratios(sides: dict, keys: tuple[str, ...]) -> dict:
    """fork / upstream of the median and of the minimum of each key (null where a side has no number)."""
    return {key: _ratio(sides["fork"].get(key), sides["upstream"].get(key)) for key in with_min(keys)}


# ---- stalls and floors ---------------------------------------------------------------------------------------


def stalls(entry: dict) -> dict | None:
    """The stalls of one run's decode entry (one model, one process): the decode steps slower than STALL_FACTOR times
    the run's usual fast step (its 10th percentile, so that a run can be judged even when most of its steps
    stalled), how many there are, and the share of the timed steps' time they add (their excess over that step).
    None without steps."""
    steps = sorted(step for call in entry.get("timed_step_ms") or [] for step in call)
    if not steps or sum(steps) <= 0:
        return None
    fast = steps[len(steps) // 10]
    slow = [step for step in steps if step > STALL_FACTOR * fast]
    return {
        "steps": len(steps),
        "stalled_steps": len(slow),
        "fast_step_ms": fast,
        "median_step_ms": statistics.median(steps),
        "max_step_ms": steps[-1],
        "share": sum(step - fast for step in slow) / sum(steps),
    }


def stalled(result: dict) -> dict[str, dict]:
    """The models of one run (a side's process, as `bench.scenarios` writes it) whose decode steps stalled: their
    stalls make up more than STALL_SHARE of the run's timed steps' time. Empty when the run is clean or has no
    decode."""
    found = {}
    for model, entry in result.get("scenarios", {}).get("decode", {}).items():
        summary = stalls(entry) if entry.get("status") == "ok" else None
        if summary and summary["share"] > STALL_SHARE:
            found[model] = summary
    return found


def stall_share(result: dict, models=None) -> float:
    """The largest share of a run's timed decode steps' time that its stalls make up, over its models (0: none), or
    over those of `models` only (a rerun's, to compare a run with its rerun on what both timed)."""
    found = result.get("scenarios", {}).get("decode", {})
    entries = [entry for model, entry in found.items() if models is None or model in models]
    shares = [summary["share"] for e in entries if e.get("status") == "ok" and (summary := stalls(e))]
    return max(shares, default=0.0)


def describe_stalls(found: dict[str, dict]) -> str:
    """`gpt2: 12 of 341 decode steps over 5x the run's 10th-percentile step (0.41 ms), 23% of its decode time`"""
    return "; ".join(
        f"{model}: {s['stalled_steps']} of {s['steps']} decode steps over {STALL_FACTOR:g}x the run's 10th-percentile "
        f"step ({_fmt(s['fast_step_ms'])} ms), {100 * s['share']:.0f}% of its decode time"
        for model, s in found.items()
    )


def floors(entries: list[dict]) -> dict:
    """The floors of one side's decode entries (one model, every run): each segment of a timed `generate` call (the
    host work before the prefill, each forward, the host work between a forward and the next, and after the last)
    at its fastest over all the side's timed calls, summed over the call and divided by its tokens. A stall only ever
    adds time to the segments it falls in, and a segment is shorter than the scheduler's time slice, so unless a
    segment stalled in every call of every run, no stall moves a floor. `forward_alone_ms_floor` is the fastest
    replay of the compiled forward alone over the runs; `step_ms_floor`, each decode step at its fastest over the calls.
    None where the calls were not cut into segments."""
    calls = [call for e in entries for call in e.get("timed_segments_ms") or []]
    shapes = {(len(call["forward"]), len(call["host"])) for call in calls}
    steps = [call for e in entries for call in e.get("timed_step_ms") or []]
    step_floor = [min(values) for values in zip(*steps)] if len({len(call) for call in steps}) == 1 else None
    if not calls or len(shapes) != 1:
        return {**dict.fromkeys((f"{key}_floor" for key in FLOOR_TIMES), None), "step_ms_floor": step_floor}
    tokens = entries[0].get("new_tokens")
    if tokens is None:
        # Runs from before `new_tokens` was recorded: a forward per token, but for the compiled decoding step, whose
        # one forward timed is the prefill (its decoding steps run inside it): its time over its time per token
        call, per_token = calls[0], (entries[0].get("timed_ms_per_token") or [None])[0]
        single = len(call["forward"]) == 1 and per_token
        tokens = round((sum(call["forward"]) + sum(call["host"])) / per_token) if single else len(call["forward"])
    forward = sum(min(values) for values in zip(*(call["forward"] for call in calls)))
    host = sum(min(values) for values in zip(*(call["host"] for call in calls)))
    fastest = [e["forward_alone_fastest_ms"] for e in entries if _number(e.get("forward_alone_fastest_ms"))]
    return {
        "ms_per_token_floor": (forward + host) / tokens,
        "host_ms_per_token_floor": host / tokens,
        "forward_ms_per_token_floor": forward / tokens,
        "forward_alone_ms_floor": min(fastest) if fastest else None,
        "step_ms_floor": step_floor,  # each decode step at its fastest over the calls: the plot's left side
    }


def contradicted(decode: dict) -> list[str]:
    """The floor timings (FLOOR_TIMES) of one model's decode entry whose median ratio and floor ratio, fork /
    upstream, disagree on which tree is faster: one below 1, the other above."""
    ratio = decode.get("ratio") or {}
    found = []
    for key in FLOOR_TIMES:
        median, floor = ratio.get(key), ratio.get(f"{key}_floor")
        if _number(median) and _number(floor) and (median - 1) * (floor - 1) < 0:
            found.append(key)
    return found


def stall_counts(decode: dict) -> str:
    """`stalled runs: upstream 0 of 5, fork 5 of 5`: per tree, its used runs still stalled on the model."""
    cells = [
        f"{side} {decode[side].get('stalled_runs', '?')} of {decode[side].get('runs', '?')}"
        for side in SIDES
        if decode.get(side, {}).get("status") == "ok"
    ]
    return f"stalled runs: {', '.join(cells)}"


def describe_contradiction(model: str, decode: dict) -> str | None:
    """One line for a model whose median ratios contradict its floor ratios, with both trees' stall counts, e.g.
    `decode.llama: the median and the floor disagree on which tree is faster: ms_per_token 1.25x by the median,
    0.62x by the floor; stalled runs: upstream 0 of 5, fork 5 of 5 (the floors are the verdict)`. None without."""
    keys = contradicted(decode)
    if not keys:
        return None
    ratio = decode["ratio"]
    shown = "; ".join(
        f"{key} {ratio[key]:.2f}x by the median, {ratio[f'{key}_floor']:.2f}x by the floor" for key in keys
    )
    return (
        f"decode.{model}: the median and the floor disagree on which tree is faster: {shown}; "
        f"{stall_counts(decode)} (the floors are the verdict)"
    )


# ---- the compiled decoding step -------------------------------------------------------------------------------


def _step_figures(entry: dict | None) -> dict | None:
    """ms per token of one side's decode entry: the floor, the median and the range over the runs (None if failed)."""
    if not entry or entry.get("status") != "ok":
        return None
    return {key: entry.get(f"ms_per_token{suffix}") for key, suffix in
            (("floor", "_floor"), ("median", ""), ("min", "_min"), ("max", "_max"))}  # fmt: skip


def _step_ratio(numerator: dict | None, denominator: dict | None) -> dict | None:
    """numerator / denominator by the floor and by the median, and the range the runs allow (the least: the fastest
    numerator over the slowest denominator; the most: the reverse)."""
    if numerator is None or denominator is None:
        return None
    return {
        "floor": _ratio(numerator["floor"], denominator["floor"]),
        "median": _ratio(numerator["median"], denominator["median"]),
        "range": [_ratio(numerator["min"], denominator["max"]), _ratio(numerator["max"], denominator["min"])],
    }


def decoding_step_summary(decode: dict) -> dict:
    """Per `<model> decoding_step[ <configuration>]` entry (the fork's `compile_decoding_step=True`): ms per
    token of pristine's `CompileConfig()` in the same configuration, of the fork's, of the compiled step, and in the
    greedy one of the hand-written loop over the same compiled forward (the fork's), with the ratios step / pristine's
    `CompileConfig()` and step / hand-written loop (see `_step_ratio`)."""
    summary = {}
    for key, sides in decode.items():
        model, _, configuration = key.partition(" decoding_step")
        if not key.startswith(f"{model} decoding_step") or " speculative" in model:  # see speculative_summary
            continue
        regular = decode.get(f"{model} compile_config{configuration}", {})
        figures = {
            "pristine_compile_config": _step_figures(regular.get("upstream")),
            "fork_compile_config": _step_figures(regular.get("fork")),
            "decoding_step": _step_figures(sides.get("fork")),
            "handwritten": _step_figures(decode.get(f"{model} handwritten", {}).get("fork"))
            if not configuration
            else None,
        }
        figures["step_vs_pristine"] = _step_ratio(figures["decoding_step"], figures["pristine_compile_config"])
        figures["step_vs_handwritten"] = _step_ratio(figures["decoding_step"], figures["handwritten"])
        summary[f"{model} {configuration.strip() or 'greedy'}"] = figures
    return summary


def speculative_summary(decode: dict) -> dict:
    """Per `<model> speculative <method>` entry (`bench.scenarios.speculative`), per tree: ms per token (floor,
    median, range: as `_step_figures`), the main model's forwards, the shapes its verification forward took, the
    graphs compiled by the first call and by all, whether the tokens are greedy `generate`'s, or the error; and the
    ratios fork / pristine, and the fork's method / the fork's call without speculation (`none`) and / its compiled
    decoding step (`decoding_step`), by the floor (see `_step_ratio`)."""
    summary = {}
    for key, sides in decode.items():
        model, _, method = key.partition(" speculative ")
        if not method:
            continue
        figures = {}
        for side in SIDES:
            entry = sides.get(side, {})
            if entry.get("status") != "ok":
                figures[side] = {"status": entry.get("status", "not run")}
                continue
            figures[side] = {
                "status": "ok",
                "ms_per_token": _step_figures(entry),
                **{name: entry.get(name) for name in ("forward_calls", "decode_mask_shapes", *SPECULATIVE_COUNTS)},
            }
        summary[key] = figures

    def times(key: str, side: str) -> dict | None:
        return (summary.get(key, {}).get(side) or {}).get("ms_per_token")

    for key, figures in summary.items():
        model = key.partition(" speculative ")[0]
        fork = times(key, "fork")
        figures["ratio"] = _step_ratio(fork, times(key, "upstream"))
        figures["vs_none"] = _step_ratio(fork, times(f"{model} speculative none", "fork"))
        figures["vs_decoding_step"] = _step_ratio(fork, times(f"{model} speculative decoding_step", "fork"))
    return summary


# ---- aggregation ---------------------------------------------------------------------------------------------


def _first_with(runs: list[dict], side: str, scenario: str) -> dict | None:
    """The side's first run (in run order) that ran `scenario`."""
    return next((r for r in runs if r["side"] == side and scenario in r["scenarios"]), None)


def _decode(model: str, side: str, runs: list[dict], warnings: list[str]) -> tuple[dict, dict]:
    """One side's decode and compile-cost entries of one model from its runs."""
    # (the size models are timed in a tree's first run only: when a rerun replaced its decode, from the run itself)
    timed = [r for r in runs if r["side"] == side and model in r["scenarios"].get("decode", {})]
    used = [r for r in timed if r.get("used", True)] or [r for r in timed if not r.get("rerun")]
    side_runs = [r["scenarios"]["decode"][model] for r in used]
    failed = _failure(side_runs)
    if failed:
        decode = {"status": failed}
    else:
        decode = {"status": "ok", "runs": len(side_runs)}
        decode.update(_times(f"{side} decode.{model}", side_runs, DECODE_TIMES, warnings))
        # the floors over every attempt, a replaced one too: interference only ever adds time, so a segment's fastest
        # run is a measure wherever it ran (a rerun is kept for its medians, and may itself be slower throughout)
        decode.update(
            floors(
                [
                    r["scenarios"]["decode"][model]
                    for r in timed
                    if r["scenarios"]["decode"][model].get("status", "ok") == "ok"
                ]
            )
        )
        decode.update(_counts(side_runs, DECODE_COUNTS))
        if "graphs_first_call" in side_runs[0]:
            decode.update(_counts(side_runs, SPECULATIVE_COUNTS))
            decode["same_tokens"] = all(entry.get("same_tokens") is True for entry in side_runs)  # in every run
        fastest = min(side_runs, key=lambda e: e["ms_per_token"])
        decode["step_ms"] = fastest["step_ms"]
        decode["step_cpu_ms"] = fastest.get("step_cpu_ms")
        # The first call of each process: with a cold inductor cache in a tree's first run, a warm one after
        first_calls = {
            cold: [r["scenarios"]["decode"][model]["first_generate_s"] for r in used
                   if r.get("inductor_cache_cold") is cold and "first_generate_s" in r["scenarios"]["decode"][model]]
            for cold in (True, False)
        }  # fmt: skip
        if first_calls[True]:
            decode["first_call_cold_s"] = min(first_calls[True])
        if first_calls[False]:
            decode["first_call_warm_s"] = min(first_calls[False])
            decode["first_call_warm_max_s"] = max(first_calls[False])
        still = [r for r in used if model in stalled(r)]
        decode["stalled_runs"] = len(still)
        decode["reruns"] = sum(1 for r in runs if r["side"] == side and r.get("rerun"))
    # the compile cost of the runs whose inductor cache was cold (every run with --long; the first one by default)
    # (none for a model's other decoding configurations: they share its compile)
    costs = [
        r["scenarios"]["compile_cost"][model]
        for r in runs
        if r["side"] == side and not r.get("rerun") and model in r["scenarios"].get("compile_cost", {})
    ]
    if not costs:
        return decode, None
    cold = [cost for cost in costs if cost.get("cold_cache") is not False]
    failed = _failure(cold) if cold else "no cold compile"
    if failed:
        cost = {"status": failed}
    else:
        cost = {"status": "ok", "runs": len(cold)}
        cost.update(_times(f"{side} compile_cost.{model}", cold, COMPILE_TIMES, warnings))
        cost.update(_counts(cold, COMPILE_COUNTS))
    return decode, cost


def first_call_summary(found: dict | None) -> dict | None:
    """`bench.first_call.run`'s figures: per model, tree, path and kind (cold, warm, warm_vec_isa_ok), the least
    and the most of its processes' first calls (wall and CPU time, s) and how many ran; per model and path run on
    both trees, the ratio of the least (fork / pristine) and the cold compiles' verdict by their CPU times: None
    below 3 processes per tree, else "fork faster" or "pristine faster" where the trees' ranges do not overlap, or
    "ranges overlap"."""
    if not found:
        return None
    if "status" in found:  # the first line of the error that stopped them
        return {"status": found["status"], "models": {}}
    summary: dict = {"torch_version": found.get("torch_version"), "models": {}}
    for model, sides in found["models"].items():
        entry = summary["models"][model] = {}
        for side, paths in sides.items():
            for path, kinds in paths.items():
                figures = entry.setdefault(path, {}).setdefault(side, {})
                for kind, values in kinds.items():
                    if values:
                        figures[kind] = {"least": min(values), "most": max(values), "processes": len(values)}
        for path, by_side in entry.items():
            if set(by_side) < set(SIDES):
                continue
            by_side["ratio"] = {
                kind: _ratio(by_side["fork"][kind]["least"], by_side["upstream"][kind]["least"])
                for kind in by_side["fork"]
                if kind in by_side["upstream"]
            }
            up, fork = by_side["upstream"].get("cold_cpu"), by_side["fork"].get("cold_cpu")
            if up and fork:
                if min(up["processes"], fork["processes"]) < 3:
                    by_side["cold_verdict"] = None
                elif fork["most"] < up["least"]:
                    by_side["cold_verdict"] = "fork faster"
                elif up["most"] < fork["least"]:
                    by_side["cold_verdict"] = "pristine faster"
                else:
                    by_side["cold_verdict"] = "ranges overlap"
    return summary


def aggregate(runs: list[dict], meta: dict) -> dict:
    """`runs`: each side's result (as `bench.scenarios` writes it), in run order, each with `used` (False for a run
    whose decode a rerun replaced; True when absent). Timings: medians, minimums and maximums over a side's used runs,
    with a warning per timing whose runs spread, and the floors (see `floors`); compile costs from the runs with a
    cold inductor cache; counts with their range over the runs; the rest (statuses, matrices) from each side's first
    run that ran the scenario. A scenario that failed in a side's run is that side's status.
    """
    first = {side: next((r for r in runs if r["side"] == side), {}) for side in SIDES}
    warnings: list[str] = []
    results = {"schema_version": SCHEMA_VERSION, **meta, "warnings": warnings}
    results["trees"] = {
        side: {
            "src": meta["tree_src"][side],
            "transformers_file": first[side].get("transformers_file", meta["tree_src"][side]),
            "transformers_version": first[side].get("transformers_version"),
        }
        for side in SIDES
    }
    del results["tree_src"]
    # each model's layers and hidden size (as the runs give them)
    results["model_shapes"] = next((r["model_shapes"] for r in runs if r.get("model_shapes")), None)
    # the first calls' processes, as bench.first_call gives them (kept for --reaggregate), and their summary
    results["first_call_raw"] = results.pop("first_call", None)
    results["first_call"] = first_call_summary(results["first_call_raw"])

    decode_first = _first_with(runs, "upstream", "decode")
    if decode_first:
        results["decode"], results["compile_cost"] = {}, {}
        for model in decode_first["scenarios"]["decode"]:
            decode, compile_cost = {}, {}
            for side in SIDES:
                decode[side], compile_cost[side] = _decode(model, side, runs, warnings)
            decode["ratio"] = _ratios(decode, DECODE_TIMES)
            decode["ratio"].update(
                {
                    f"{key}_floor": _ratio(decode["fork"].get(f"{key}_floor"), decode["upstream"].get(f"{key}_floor"))
                    for key in FLOOR_TIMES
                }  # fmt: skip
            )
            results["decode"][model] = decode
            if None not in compile_cost.values():
                compile_cost["ratio"] = _ratios(compile_cost, COMPILE_TIMES)
                results["compile_cost"][model] = compile_cost
            for side in SIDES:
                if decode[side].get("stalled_runs"):
                    warnings.append(
                        f"{side} decode.{model}: {decode[side]['stalled_runs']} of {decode[side]['runs']} runs stalled "
                        "even after the reruns (their figures are in the medians; the floors do not move)"
                    )
            contradiction = describe_contradiction(model, decode)
            if contradiction:
                warnings.append(contradiction)
        results["decoding_step"] = decoding_step_summary(results["decode"])
        results["speculative"] = speculative_summary(results["decode"])
    calls_first = _first_with(runs, "upstream", "calls")
    if calls_first:
        results["calls"] = {}
        for model in calls_first["scenarios"]["calls"]:
            results["calls"][model] = {}
            for side in SIDES:
                entries = [
                    r["scenarios"]["calls"][model] for r in runs if r["side"] == side and "calls" in r["scenarios"]
                ]
                entry = _calls(f"{side} calls.{model}", entries, warnings)
                generated = [e.get("generate_compile") for e in entries]
                where = f"{side} calls.{model}.generate_compile"
                entry["generate_compile"] = None if None in generated else _calls(where, generated, warnings)
                results["calls"][model][side] = entry
    for scenario in ("recompiles", "tracing", "mask_matrix"):
        sources = {side: _first_with(runs, side, scenario) for side in SIDES}
        if not all(sources.values()):
            continue
        found = {side: sources[side]["scenarios"][scenario] for side in SIDES}
        if scenario == "recompiles":
            results[scenario] = {
                model: {config: {side: found[side][model][config] for side in SIDES} for config in configs}
                for model, configs in found["upstream"].items()
            }
        elif scenario == "tracing":
            results[scenario] = {case: {side: found[side][case] for side in SIDES} for case in found["upstream"]}
        else:
            results[scenario] = {
                path: {kind: {side: found[side][path][kind] for side in SIDES} for kind in kinds}
                for path, kinds in found["upstream"].items()
            }
    return results


def _calls(where: str, entries: list[dict], warnings: list[str]) -> dict:
    """One side's consecutive calls: per call, the median and the minimum over the runs; recordings of the first."""
    failed = _failure(entries)
    if failed:
        return {"status": failed}
    call_ms, call_ms_min, spreads = [], [], []
    for n, values in enumerate(zip(*(e["call_ms"] for e in entries))):
        call_ms.append(statistics.median(values))
        call_ms_min.append(min(values))
        spread = _spread(list(values))
        if spread:
            spreads.append(f"call_ms[{n}] {spread}")
    _warn_spread(where, spreads, warnings)
    recordings = entries[0]["cudagraph_recordings"]
    return {"status": "ok", "call_ms": call_ms, "call_ms_min": call_ms_min, "cudagraph_recordings": recordings}


# ---- the table -----------------------------------------------------------------------------------------------


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if value == 0:
            return "0"
        return f"{value:.{digits}g}" if abs(value) < 1e-2 else f"{value:.{digits}f}".rstrip("0").rstrip(".")
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _grid(title: str, header: list[str], rows: list[list]) -> str:
    cells = [header] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [title]
    for n, row in enumerate(cells):
        lines.append(
            "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        )
        if n == 0:
            lines.append("  " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _status(entry: dict, measures: tuple[str, ...]) -> str:
    if entry.get("status") != "ok":
        return entry.get("status", "-")
    return "ok, " + ", ".join(f"{key}={_fmt(entry[key])}" for key in measures if key in entry)


TRACING_MEASURES = (
    "rank1_empty_graph_inputs",
    "rank1_empty_constants",
    "graphs",
    "recompiles",
    "rank_mismatch_recompiles",
)
RECOMPILE_MEASURES = (
    "graphs",
    "graphs_after_first_decode_step",
    "recompiles",
    "graph_breaks",
    "symint_inputs_of_decode_graphs",
    "symint_values_of_decode_steps",
    "decode_mask_shapes",
    "decode_mask_addresses",
)


def _runs_cell(entry: dict, key: str) -> str:
    """`median [min-max]` of one timing over a side's runs (just the median with one run)."""
    median, low, high = entry.get(key), entry.get(f"{key}_min"), entry.get(f"{key}_max")
    if low is None or high is None or low == high:
        return _fmt(median)
    return f"{_fmt(median)} [{_fmt(low)}-{_fmt(high)}]"


def _count_cell(entry: dict, key: str) -> str:
    """A count, with its range over the runs when it varied."""
    value, spread = entry.get(key), entry.get(f"{key}_range")
    if spread and spread[0] != spread[1]:
        return f"{_fmt(value)} ({_fmt(spread[0])}-{_fmt(spread[1])} over the runs)"
    return _fmt(value)


def _failed(sides: dict) -> list[str] | None:
    """Each side's status when a side failed, else None."""
    statuses = [sides[side].get("status", "ok") for side in SIDES]
    return statuses if any(status != "ok" for status in statuses) else None


DECODE_HEADER = ["", "upstream floor", "upstream runs", "fork floor", "fork runs", "ratio floor", "ratio median"]


def _decode_rows(model: str, decode: dict) -> list[list]:
    failed = _failed(decode)
    if failed:
        return [[model, "", failed[0], "", failed[1], "", ""]]
    up, fork, ratio = decode["upstream"], decode["fork"], decode["ratio"]
    rows = []
    for key in DECODE_TIMES:
        floor = key in FLOOR_TIMES
        rows.append(
            [
                f"{model} {key}",
                up.get(f"{key}_floor") if floor else "",
                _runs_cell(up, key),
                fork.get(f"{key}_floor") if floor else "",
                _runs_cell(fork, key),
                ratio.get(f"{key}_floor") if floor else "",
                ratio.get(key),
            ]
        )
    for key in ("decode_mask_shapes", "decode_mask_addresses", "cudagraph_recordings"):
        if all(decode[side].get(key) is not None for side in SIDES):
            rows.append([f"{model} {key}", "", _count_cell(up, key), "", _count_cell(fork, key), "", ""])
    rows.append([f"{model} runs", "", _runs_note(up), "", _runs_note(fork), "", ""])
    return rows


STEP_HEADER = [
    "", "pristine CompileConfig()", "fork CompileConfig()", "fork step", "hand-written", "step / pristine",
    "step / hand-written",
]  # fmt: skip


SPECULATIVE_HEADER = [
    "", "upstream", "upstream counts", "fork", "fork counts", "fork / upstream", "fork / none", "fork / step",
]  # fmt: skip


def _step_cell(figures: dict | None) -> str:
    return "" if figures is None else f"{_fmt(figures['floor'])} ({_fmt(figures['median'])})"


def _step_ratio_cell(ratio: dict | None) -> str:
    if ratio is None:
        return ""
    low, high = ratio["range"]
    return f"{_fmt(ratio['floor'])} ({_fmt(ratio['median'])} [{_fmt(low)}-{_fmt(high)}])"


def _step_row(name: str, figures: dict) -> list:
    times = ("pristine_compile_config", "fork_compile_config", "decoding_step", "handwritten")
    ratios = ("step_vs_pristine", "step_vs_handwritten")
    return [name, *(_step_cell(figures[key]) for key in times), *(_step_ratio_cell(figures[key]) for key in ratios)]


def _runs_note(entry: dict) -> str:
    note = f"{entry['runs']}"
    extra = []
    if entry.get("reruns"):
        extra.append(f"{entry['reruns']} rerun{'s' if entry['reruns'] > 1 else ''} after stalls")
    if entry.get("stalled_runs"):
        extra.append(f"{entry['stalled_runs']} still stalled")
    return note + (f" ({', '.join(extra)})" if extra else "")


COMPILE_HEADER = ["", "upstream", "fork", "ratio median", "ratio min"]


def _compile_rows(model: str, cost: dict) -> list[list]:
    failed = _failed(cost)
    if failed:
        return [[model, *failed, "", ""]]
    up, fork, ratio = cost["upstream"], cost["fork"], cost["ratio"]
    rows = [
        [f"{model} {key}", _runs_cell(up, key), _runs_cell(fork, key), ratio.get(key), ratio.get(f"{key}_min")]
        for key in COMPILE_TIMES
    ]
    for key in COMPILE_COUNTS:
        if all(cost[side].get(key) is not None for side in SIDES):
            rows.append([f"{model} {key}", _count_cell(up, key), _count_cell(fork, key), "", ""])
    rows.append([f"{model} cold compiles", up["runs"], fork["runs"], "", ""])
    return rows


def _calls_rows(label: str, entry: dict | None, width: int) -> list[list]:
    """One row of call times (or the status), and one of CUDA-graph recordings per call where counted."""
    if entry is None:
        return []
    if entry["status"] != "ok":
        return [[label, entry["status"], *[""] * (width - 1)]]
    rows = [[label, *entry["call_ms"]]]
    if entry["cudagraph_recordings"] is not None:
        rows.append([f"{label} cudagraph recordings", *entry["cudagraph_recordings"]])
    return [row + [""] * (width + 1 - len(row)) for row in rows]


def _load(results: dict) -> str:
    load = results.get("environment", {}).get("load_average")
    if not load:
        return ""
    return f", load average {_fmt(load['start'], 2)} at the start and {_fmt(load['end'], 2)} at the end"


def table(results: dict) -> str:
    trees = results["trees"]
    threads = results.get("threads")
    parts = [
        f"upstream = {trees['upstream']['transformers_file']}\n"
        f"fork     = {trees['fork']['transformers_file']}\n"
        f"device {results['device']}, compile mode {results['compile_mode']}"
        f"{f', {threads} torch thread(s)' if threads else ''}, {results['reps']} run(s) per tree, "
        f"{results.get('environment', {}).get('cpu_count', '?')} cores{_load(results)}"
    ]
    if results.get("quick") or results.get("reps", 0) < 2:
        parts.append(
            "NO VERDICT: a quick run (one run per tree, one model, a few tokens) checks that the benchmark runs; its "
            "times are single calls on a machine whose other work moves them. `make bench` gives the ratios to read."
        )
    if "decode" in results:
        rows = [row for model, decode in results["decode"].items() for row in _decode_rows(model, decode)]
        parts.append(
            _grid(
                "1. decode loop (static cache, compiled forward), ms. floor: each part of a call at its fastest over "
                "the tree's calls, which no stall moves (the published ratio); runs: median [min-max] over the runs, "
                "each run the median of its calls; ratio = fork / upstream",
                DECODE_HEADER,
                rows,
            )
        )
        rows = [row for model, cost in results["compile_cost"].items() for row in _compile_rows(model, cost)]
        parts.append(
            _grid(
                "3. compile cost: the first generate call with a cold inductor cache, s, median [min-max] over the "
                "cold compiles (one per tree unless --long); CPU time: of the process and the compilers it waited for",
                COMPILE_HEADER,
                rows,
            )
        )
    if results.get("decoding_step"):
        rows = [_step_row(name, figures) for name, figures in results["decoding_step"].items()]
        parts.append(
            _grid(
                "7. the compiled decoding step (the fork's compile_decoding_step=True), ms per token, floor "
                "(median): pristine's and the fork's CompileConfig(), the step, the hand-written loop over the same "
                "compiled forward (greedy); ratios by the floor (median [the range the runs allow])",
                STEP_HEADER,
                rows,
            )
        )
    if results.get("speculative"):
        rows = []
        for key, figures in results["speculative"].items():
            cells = []
            for side in SIDES:
                entry = figures[side]
                if entry["status"] != "ok":
                    cells += [entry["status"], ""]
                    continue
                counts = (
                    f"{entry['forward_calls']} / {entry['decode_mask_shapes']} / {entry['graphs_first_call']}, "
                    f"{entry['graphs']} / {'yes' if entry['same_tokens'] else 'NO'}"
                )
                cells += [_step_cell(entry["ms_per_token"]), counts]
            ratios = [_step_ratio_cell(figures[name]) for name in ("ratio", "vs_none", "vs_decoding_step")]
            rows.append([key, *cells, *ratios])
        parts.append(
            _grid(
                "8. speculative decoding (batch 1, static cache, generate's CompileConfig()), ms per token, floor "
                "(median); forwards of the main model / shapes of its verification forward / graphs after the first "
                "call, after all / greedy tokens; ratios by the floor (median [range]): fork / upstream, and the "
                "fork's against its call without speculation and its compiled decoding step",
                SPECULATIVE_HEADER,
                rows,
            )
        )
    if "recompiles" in results:
        rows = []
        for model, configs in results["recompiles"].items():
            for config, sides in configs.items():
                cells = []
                for side in SIDES:
                    entry = sides[side]
                    ok = entry.get("status") == "ok"
                    cells.append(" / ".join(str(entry[key]) for key in RECOMPILE_MEASURES) if ok else entry["status"])
                rows.append([f"{model} {config}", *cells])
        header = " / ".join(RECOMPILE_MEASURES).replace("decode_mask_", "mask ").replace("_", " ")
        parts.append(_grid(f"2. over the decode steps: {header}", ["", *SIDES], rows))
    if "tracing" in results:
        rows = [
            [case] + [_status(sides[side], TRACING_MEASURES) for side in SIDES]
            for case, sides in results["tracing"].items()
        ]
        parts.append(_grid("4. tracing from an empty cache (GPT2)", ["", *SIDES], rows))
    if "mask_matrix" in results:
        rows = [
            [f"{path} {kind}"] + [sides[side] for side in SIDES]
            for path, kinds in results["mask_matrix"].items()
            for kind, sides in kinds.items()
        ]
        parts.append(_grid("5. GPT2 max |Δ logits| against the 2-D mask", ["", *SIDES], rows))
    if "calls" in results:
        entries = [
            (f"{model} {side}{suffix}", sides[side] if not suffix else sides[side]["generate_compile"])
            for model, sides in results["calls"].items()
            for suffix in ("", " generate_compile")
            for side in SIDES
        ]
        width = max((len(e["call_ms"]) for _, e in entries if e and e["status"] == "ok"), default=1)
        rows = [row for label, entry in entries for row in _calls_rows(label, entry, width)]
        header = ["", *(f"call {n + 1}" for n in range(width))]
        parts.append(
            _grid("6. consecutive generate calls after a dynamo reset (ms, medians; call 1 compiles)", header, rows)
        )
    if (results.get("first_call") or {}).get("status"):
        parts.append(f"8. the first generate of a new process (bench.first_call): {results['first_call']['status']}")
    elif results.get("first_call"):
        rows = []
        for model, paths in results["first_call"]["models"].items():
            for path, by_side in paths.items():
                for side in SIDES:
                    figures = by_side.get(side)
                    if figures:
                        cells = [
                            f"{figures[kind]['least']:.2f} [{figures[kind]['most']:.2f}] x{figures[kind]['processes']}"
                            if kind in figures
                            else "-"
                            for kind in ("cold", "cold_cpu", "warm", "warm_vec_isa_ok")
                        ]
                        verdict = by_side.get("cold_verdict", "-") if side == "fork" else ""
                        rows.append([f"{model} {path} {side}", *cells, verdict or "no verdict"])
        parts.append(
            _grid(
                "8. the first generate of a new process (bench.first_call), s, least [most] xprocesses: cold (an "
                "empty inductor cache; wall, then CPU time), warm (the cache the cold one wrote), and warm with "
                "TORCHINDUCTOR_VEC_ISA_OK=1; the cold compiles' verdict (3 per tree or more, their CPU times' ranges apart)",
                ["", "cold", "cold CPU", "warm", "warm, VEC_ISA_OK=1", "cold compiles"],
                rows,
            )
        )
    if results.get("warnings"):
        found = results["warnings"]
        kinds = {}
        for warning in found:
            kind = "spread" if "spread by more than" in warning else "stalls" if "stalled" in warning else "other"
            kinds[kind] = kinds.get(kind, 0) + 1
        shown = ", ".join(f"{kind} {count}" for kind, count in kinds.items())
        parts.append(f"{len(found)} warnings ({shown}): the list is in the run's warnings.txt")
    return "\n\n".join(_numbered(parts))


def _numbered(parts: list[str]) -> list[str]:
    """The parts with their numbered tables (`N. title`) numbered again in the order they are printed."""
    numbered, n = [], 0
    for part in parts:
        head, sep, rest = part.partition(". ")
        if head.isdigit() and sep:
            n += 1
            part = f"{n}. {rest}"
        numbered.append(part)
    return numbered


# ---- the plot ------------------------------------------------------------------------------------------------


# Each series of the plot's left side (model x tree) its own colour, line style and marker: per model a pair of
# tab20's colours (the fork the darker) and a marker, per tree a line style.
MODEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
SIDE_LINES = {"upstream": "--", "fork": "-"}


def series_styles(models: list[str]) -> dict[tuple[str, str], dict]:
    """The style of each (model, side) line of the plot's left side: `color`, `linestyle`, `marker`, each
    combination distinct (the colours too, for up to 10 models)."""
    import matplotlib

    palette = matplotlib.colormaps["tab20"].colors
    styles = {}
    for n, model in enumerate(models):
        for side in SIDES:
            shade = 0 if side == "fork" else 1  # tab20 pairs a dark colour with its light one
            styles[model, side] = {
                "color": palette[(2 * n + shade) % len(palette)],
                "linestyle": SIDE_LINES[side],
                "marker": MODEL_MARKERS[n % len(MODEL_MARKERS)],
            }
    return styles


def figure(results: dict):
    """The plot's figure (see `plot`), or None without decode."""
    if "decode" not in results:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the models' greedy decoding (their other configurations, `<model> <configuration>`, are in the table)
    models = [model for model in results["decode"] if " " not in model]
    fig, (steps_ax, split_ax) = plt.subplots(1, 2, figsize=(12, 5.2))
    styles = series_styles(models)
    for model in models:
        for side in SIDES:
            entry = results["decode"][model][side]
            step_ms = entry.get("step_ms_floor") or entry.get("step_ms") if entry["status"] == "ok" else None
            if step_ms:
                steps_ax.plot(
                    range(1, len(step_ms) + 1),
                    step_ms,
                    label=f"{model} {side}",
                    markersize=3,
                    markevery=max(1, len(step_ms) // 8),
                    **styles[model, side],
                )
    steps_ax.set(xlabel="decode step", ylabel="latency (ms)", title="decode steps, each at its fastest over the calls")
    steps_ax.set_ylim(bottom=0)
    steps_ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    bars = []  # (label, forward floor, host floor, median, min, max, forward alone)
    for model in models:
        for side in SIDES:
            entry = results["decode"][model][side]
            if entry["status"] != "ok" or entry.get("ms_per_token_floor") is None:
                continue
            bars.append(
                (
                    f"{model}\n{side}",
                    entry["forward_ms_per_token_floor"],
                    entry["host_ms_per_token_floor"],
                    entry["ms_per_token"],
                    entry["ms_per_token_min"],
                    entry["ms_per_token_max"],
                    entry["forward_alone_ms_floor"],
                )
            )
    if bars:
        labels, forward, host, median, low, high, limit = zip(*bars)
        x = list(range(len(labels)))
        split_ax.bar(x, forward, width=0.55, label="floor: inside the compiled forward", color="tab:blue")
        split_ax.bar(
            x, host, width=0.55, bottom=forward, label="floor: host (the rest of generate)", color="tab:orange"
        )
        split_ax.scatter(x, limit, marker="_", s=500, color="black", label="compiled forward alone (floor)", zorder=3)
        runs_x = [i + 0.38 for i in x]
        split_ax.errorbar(
            runs_x,
            median,
            yerr=[[m - lo for m, lo in zip(median, low)], [hi - m for m, hi in zip(median, high)]],
            fmt="o",
            color="black",
            markersize=4,
            capsize=4,
            label="runs: median, min-max",
        )
        split_ax.set_xticks(x, labels)
    split_ax.set(ylabel="ms per token", title="where a token's time goes")
    split_ax.set_ylim(bottom=0)
    split_ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False, fontsize="small")
    load = results.get("environment", {}).get("load_average")
    where = f", load average {load['start']:.1f} at the start, {load['end']:.1f} at the end" if load else ""
    fig.suptitle(
        f"fork vs upstream {results['trees']['upstream']['transformers_version']} ({results['device']}, "
        f"{results['reps']} runs per tree{where})"
    )
    fig.tight_layout()
    return fig


def plot(results: dict, path: Path) -> bool:
    """Per-step decode latency of both trees (the floors), one line per model and tree, each in its own colour, line
    style and marker (`series_styles`), and per token the floors split into the compiled forward and the host work,
    with the runs' median and spread (min-max). False without decode."""
    fig = figure(results)
    if fig is None:
        return False
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
