"""Aggregates the sides' runs into `results.json`, prints the table and draws the plot (see README.md here)."""

from __future__ import annotations

import statistics
from pathlib import Path


SCHEMA_VERSION = 1
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


def _ratio(fork, upstream):
    if isinstance(fork, (int, float)) and isinstance(upstream, (int, float)) and upstream:
        return fork / upstream
    return None


def _by_side(runs: list[dict]) -> dict[str, list[dict]]:
    return {side: [run for run in runs if run["side"] == side] for side in SIDES}


def aggregate(runs: list[dict], meta: dict) -> dict:
    """`runs`: each side's result (as `bench.scenarios` writes it), in run order. Timings: medians over the runs of a
    side; the rest (counts, statuses, matrices) is deterministic and taken from each side's first run."""
    by_side = _by_side(runs)
    first = {side: by_side[side][0]["scenarios"] for side in SIDES}
    results = {"schema_version": SCHEMA_VERSION, **meta}
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
                entry = {key: statistics.median(r[key] for r in side_runs) for key in DECODE_TIMES}
                entry.update({key: side_runs[0][key] for key in DECODE_COUNTS})
                median_run = sorted(side_runs, key=lambda r: r["ms_per_token"])[len(side_runs) // 2]
                entry["step_ms"] = median_run["step_ms"]
                decode[side] = entry
                costs = [run["scenarios"]["compile_cost"][model] for run in by_side[side]]
                compile_cost[side] = {
                    "first_generate_s": statistics.median(c["first_generate_s"] for c in costs),
                    "first_forward_s": statistics.median(c["first_forward_s"] for c in costs),
                    "graphs": costs[0]["graphs"],
                }
            decode["ratio"] = {key: _ratio(decode["fork"][key], decode["upstream"][key]) for key in DECODE_TIMES}
            compile_cost["ratio"] = {
                key: _ratio(compile_cost["fork"][key], compile_cost["upstream"][key])
                for key in ("first_generate_s", "first_forward_s")
            }
            results["decode"][model] = decode
            results["compile_cost"][model] = compile_cost
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


def table(results: dict) -> str:
    trees = results["trees"]
    parts = [
        f"upstream = {trees['upstream']['transformers_file']}\n"
        f"fork     = {trees['fork']['transformers_file']}\n"
        f"device {results['device']}, compile mode {results['compile_mode']}, {results['reps']} run(s) per tree, "
        f"order {' '.join(results['order'])}; times are medians, ratio = fork / upstream"
    ]
    if "decode" in results:
        rows = []
        for model, decode in results["decode"].items():
            for key in DECODE_TIMES:
                rows.append([f"{model} {key}", decode["upstream"][key], decode["fork"][key], decode["ratio"][key]])
            for key in ("decode_mask_shapes", "decode_mask_addresses", "cudagraph_recordings"):
                if decode["upstream"][key] is not None:
                    rows.append([f"{model} {key}", decode["upstream"][key], decode["fork"][key], None])
        parts.append(_grid("1. decode loop (static cache, compiled forward)", ["", "upstream", "fork", "ratio"], rows))
        rows = [
            [
                f"{model} first generate (s)",
                c["upstream"]["first_generate_s"],
                c["fork"]["first_generate_s"],
                c["ratio"]["first_generate_s"],
            ]
            for model, c in results["compile_cost"].items()
        ]
        parts.append(_grid("3. compile cost (first generate call)", ["", "upstream", "fork", "ratio"], rows))
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
            step_ms = results["decode"][model][side]["step_ms"]
            steps_ax.plot(range(1, len(step_ms) + 1), step_ms, line, label=f"{model} {side}", **styles[side])
    steps_ax.set(xlabel="decode step", ylabel="latency (ms)", title="per-step decode latency (median run)")
    steps_ax.set_ylim(bottom=0)
    steps_ax.legend()
    labels, forward, host, limit = [], [], [], []
    for model in models:
        for side in SIDES:
            entry = results["decode"][model][side]
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
