"""Aggregates the sides' runs into `results.json`, prints the table and draws the plot (see README.md here)."""

from __future__ import annotations

import statistics
from pathlib import Path


SCHEMA_VERSION = 2
SIDES = ("upstream", "fork")
DECODE_TIMES = (
    "ms_per_token",
    "forward_ms_per_token",
    "host_ms_per_token",
    "prefill_forward_ms",
    "decode_forward_ms",
    "forward_alone_ms",
)
DECODE_COUNTS = ("forward_calls", "decode_mask_shapes", "decode_mask_addresses", "cudagraph_recordings")
COMPILE_TIMES = ("first_generate_s", "first_generate_cpu_s", "first_forward_s")
COMPILE_COUNTS = ("graphs", "generated_files", "generated_kb")
SPREAD_LIMIT = 0.25  # a timing whose runs on one side spread by more, (max - min) / min, is warned about


def _ratio(fork, upstream):
    if isinstance(fork, (int, float)) and isinstance(upstream, (int, float)) and upstream:
        return fork / upstream
    return None


def _by_side(runs: list[dict]) -> dict[str, list[dict]]:
    return {side: [run for run in runs if run["side"] == side] for side in SIDES}


def with_min(keys: tuple[str, ...]) -> tuple[str, ...]:
    """Each timing key, then its minimum over the runs (`<key>_min`)."""
    return tuple(name for key in keys for name in (key, f"{key}_min"))


def _failure(entries: list[dict]) -> str | None:
    """The first error of the runs' entries of one side, or None when every run is ok."""
    return next((e["status"] for e in entries if e.get("status", "ok") != "ok"), None)


def _spread(where: str, values: list[float], warnings: list[str]) -> None:
    """Appends `<where>: runs spread by N% (min a, max b)` to `warnings` when (max - min) / min > SPREAD_LIMIT."""
    numbers = [v for v in values if isinstance(v, (int, float))]
    if len(numbers) < 2 or min(numbers) <= 0:
        return
    low, high = min(numbers), max(numbers)
    if (high - low) / low > SPREAD_LIMIT:
        warnings.append(f"{where}: runs spread by {100 * (high - low) / low:.0f}% (min {_fmt(low)}, max {_fmt(high)})")


def _times(where: str, entries: list[dict], keys: tuple[str, ...], warnings: list[str]) -> dict:
    """Per key, the median over the runs' entries and (`<key>_min`) their minimum; warns about spread runs."""
    summary = {}
    for key in keys:
        values = [e[key] for e in entries if isinstance(e[key], (int, float))]
        summary[key] = statistics.median(values) if values else None
        summary[f"{key}_min"] = min(values) if values else None
        _spread(f"{where}.{key}", values, warnings)
    return summary


def _ratios(sides: dict, keys: tuple[str, ...]) -> dict:
    """fork / upstream of the median and of the minimum of each key (null where a side has no number)."""
    return {key: _ratio(sides["fork"].get(key), sides["upstream"].get(key)) for key in with_min(keys)}


def _calls(where: str, entries: list[dict], warnings: list[str]) -> dict:
    """One side's consecutive calls: per call, the median and the minimum over the runs; recordings of the first."""
    failed = _failure(entries)
    if failed:
        return {"status": failed}
    call_ms, call_ms_min = [], []
    for n, values in enumerate(zip(*(e["call_ms"] for e in entries))):
        call_ms.append(statistics.median(values))
        call_ms_min.append(min(values))
        _spread(f"{where}.call_ms[{n}]", list(values), warnings)
    recordings = entries[0]["cudagraph_recordings"]
    return {"status": "ok", "call_ms": call_ms, "call_ms_min": call_ms_min, "cudagraph_recordings": recordings}


def aggregate(runs: list[dict], meta: dict) -> dict:
    """`runs`: each side's result (as `bench.scenarios` writes it), in run order. Timings: medians and minimums over
    the runs of a side, with a warning per timing whose runs spread; the rest (counts, statuses, matrices) is
    deterministic and taken from each side's first run. A scenario that failed in a side's run is that side's status.
    """
    by_side = _by_side(runs)
    first = {side: by_side[side][0]["scenarios"] for side in SIDES}
    warnings: list[str] = []
    results = {"schema_version": SCHEMA_VERSION, **meta, "warnings": warnings}
    results["trees"] = {
        side: {
            "src": meta["tree_src"][side],
            "transformers_file": by_side[side][0]["transformers_file"],
            "transformers_version": by_side[side][0]["transformers_version"],
            "static_attention_mask_available": by_side[side][0]["static_attention_mask_available"],
        }
        for side in SIDES
    }
    del results["tree_src"]

    if "decode" in first["upstream"]:
        results["decode"], results["compile_cost"] = {}, {}
        for model in first["upstream"]["decode"]:
            decode, compile_cost = {}, {}
            for side in SIDES:
                side_runs = [run["scenarios"]["decode"][model] for run in by_side[side]]
                costs = [run["scenarios"]["compile_cost"][model] for run in by_side[side]]
                failed = _failure(side_runs) or _failure(costs)
                if failed:
                    decode[side] = compile_cost[side] = {"status": failed}
                    continue
                entry = {"status": "ok", **_times(f"{side} decode.{model}", side_runs, DECODE_TIMES, warnings)}
                entry.update({key: side_runs[0][key] for key in DECODE_COUNTS})
                median_run = sorted(side_runs, key=lambda r: r["ms_per_token"])[len(side_runs) // 2]
                entry["step_ms"] = median_run["step_ms"]
                decode[side] = entry
                compile_cost[side] = {
                    "status": "ok",
                    **_times(f"{side} compile_cost.{model}", costs, COMPILE_TIMES, warnings),
                    **{key: costs[0].get(key) for key in COMPILE_COUNTS},
                }
            decode["ratio"] = _ratios(decode, DECODE_TIMES)
            compile_cost["ratio"] = _ratios(compile_cost, COMPILE_TIMES)
            results["decode"][model] = decode
            results["compile_cost"][model] = compile_cost
    if "calls" in first["upstream"]:
        results["calls"] = {}
        for model in first["upstream"]["calls"]:
            results["calls"][model] = {}
            for side in SIDES:
                entries = [run["scenarios"]["calls"][model] for run in by_side[side]]
                entry = _calls(f"{side} calls.{model}", entries, warnings)
                generated = [e.get("generate_compile") for e in entries]
                where = f"{side} calls.{model}.generate_compile"
                entry["generate_compile"] = None if None in generated else _calls(where, generated, warnings)
                results["calls"][model][side] = entry
    if "recompiles" in first["upstream"]:
        results["recompiles"] = {
            model: {config: {side: first[side]["recompiles"][model][config] for side in SIDES} for config in configs}
            for model, configs in first["upstream"]["recompiles"].items()
        }
    if "tracing" in first["upstream"]:
        results["tracing"] = {
            case: {side: first[side]["tracing"][case] for side in SIDES} for case in first["upstream"]["tracing"]
        }
    if "mask_matrix" in first["upstream"]:
        results["mask_matrix"] = {
            path: {kind: {side: first[side]["mask_matrix"][path][kind] for side in SIDES} for kind in kinds}
            for path, kinds in first["upstream"]["mask_matrix"].items()
        }
    return results


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
    "decode_mask_shapes",
    "decode_mask_addresses",
)


TIMING_HEADER = ["", "upstream median", "upstream min", "fork median", "fork min", "ratio median", "ratio min"]


def _timing_rows(label: str, sides: dict, keys: tuple[str, ...]) -> list[list]:
    """Per key, the median and the minimum of each side and both ratios; one row of statuses if a side failed."""
    if any(sides[side].get("status", "ok") != "ok" for side in SIDES):
        return [[label, sides["upstream"].get("status", "ok"), "", sides["fork"].get("status", "ok"), "", None, None]]
    return [
        [
            f"{label} {key}",
            sides["upstream"][key],
            sides["upstream"][f"{key}_min"],
            sides["fork"][key],
            sides["fork"][f"{key}_min"],
            sides["ratio"][key],
            sides["ratio"][f"{key}_min"],
        ]
        for key in keys
    ]


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


def table(results: dict) -> str:
    trees = results["trees"]
    parts = [
        f"upstream = {trees['upstream']['transformers_file']}\n"
        f"fork     = {trees['fork']['transformers_file']}\n"
        f"device {results['device']}, compile mode {results['compile_mode']}, {results['reps']} run(s) per tree, "
        f"order {' '.join(results['order'])}; times are medians and minimums over the runs, ratio = fork / upstream"
    ]
    if "decode" in results:
        rows = []
        for model, decode in results["decode"].items():
            rows += _timing_rows(model, decode, DECODE_TIMES)
            for key in ("decode_mask_shapes", "decode_mask_addresses", "cudagraph_recordings"):
                if all(decode[side].get(key) is not None for side in SIDES):
                    rows.append([f"{model} {key}", decode["upstream"][key], "", decode["fork"][key], "", None, None])
        parts.append(_grid("1. decode loop (static cache, compiled forward)", TIMING_HEADER, rows))
        rows = []
        for model, cost in results["compile_cost"].items():
            rows += _timing_rows(model, cost, COMPILE_TIMES)
            for key in COMPILE_COUNTS:
                if all(cost[side].get(key) is not None for side in SIDES):
                    rows.append([f"{model} {key}", cost["upstream"][key], "", cost["fork"][key], "", None, None])
        parts.append(_grid("3. compile cost (first generate call, s)", TIMING_HEADER, rows))
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
    if results.get("warnings"):
        parts.append("\n".join(f"WARNING: {warning}" for warning in results["warnings"]))
    return "\n\n".join(parts)


# ---- the plot ------------------------------------------------------------------------------------------------


def plot(results: dict, path: Path) -> bool:
    """Per-step decode latency of both trees, and host vs compiled-forward time per token. False without decode."""
    if "decode" not in results:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(results["decode"])
    fig, (steps_ax, split_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = {"upstream": {"color": "tab:gray"}, "fork": {"color": "tab:blue"}}
    for model, line in zip(models, ("-", "--", ":")):
        for side in SIDES:
            if results["decode"][model][side]["status"] != "ok":
                continue
            step_ms = results["decode"][model][side]["step_ms"]
            steps_ax.plot(range(1, len(step_ms) + 1), step_ms, line, label=f"{model} {side}", **styles[side])
    steps_ax.set(xlabel="decode step", ylabel="latency (ms)", title="per-step decode latency (median run)")
    steps_ax.set_ylim(bottom=0)
    steps_ax.legend()
    labels, forward, host, limit = [], [], [], []
    for model in models:
        for side in SIDES:
            entry = results["decode"][model][side]
            if entry["status"] != "ok":
                continue
            labels.append(f"{model}\n{side}")
            forward.append(entry["forward_ms_per_token"])
            host.append(entry["host_ms_per_token"])
            limit.append(entry["forward_alone_ms"])
    x = range(len(labels))
    split_ax.bar(x, forward, label="inside the compiled forward", color="tab:blue")
    split_ax.bar(x, host, bottom=forward, label="host (the rest of generate)", color="tab:orange")
    split_ax.scatter(x, limit, marker="_", s=600, color="black", label="compiled forward alone", zorder=3)
    split_ax.set_xticks(list(x), labels)
    split_ax.set(ylabel="ms per token", title="where a token's time goes")
    split_ax.legend()
    fig.suptitle(f"fork vs upstream {results['trees']['upstream']['transformers_version']} ({results['device']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
