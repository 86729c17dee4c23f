"""`python -m bench` (`make bench`): the fork against pristine upstream, side by side, in one run.

Runs `bench.scenarios` in one process per tree and repetition, alternating (upstream, fork, upstream, fork...), with
this interpreter, `PYTHONPATH` set to the tree's `src` and one torch thread. The first run of each tree compiles
with a cold inductor cache (the compile cost) and runs every scenario; the later ones time the decode loop again on
that tree's warm cache. A run whose decode steps stalled (the process was descheduled) is run again, within a
budget, and said so: per model, from the tree with more stalled runs (`next_rerun`). Writes `results.json`,
`decode.png`, the runs' raw results and logs into the output folder, prints the table, and names the folder and the
run's duration in its last line; `--publish` then copies the figures into docs/ and the README's generated blocks
(`python -m bench.publish`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forktool.common import ROOT

from . import first_call, publish, report
from .trees import fork_tree, pristine_tree, run_measure, tree_env


SCENARIOS = ("decode", "depth", "size", "speculative", "calls", "recompiles", "tracing", "mask_matrix", "first_call")
CHILD_SCENARIOS = SCENARIOS[:-1]  # as bench.scenarios.SCENARIOS; first_call runs its own processes (bench.first_call)
# run with --long (or --quick, or when named in --only): not what the headline's table reads (the 16-layer model of
# the depth goal, the consecutive calls, the first calls of new processes, and the matrices of docs/bench.md's last
# rows: tracing from an empty cache, GPT2's 4-D masks)
LONG_SCENARIOS = ("depth", "calls", "tracing", "mask_matrix", "first_call")
# timed again in every run; the others (counts, matrices, the size row) run once per tree
REPEATED = ("decode", "depth", "speculative", "calls")
RERUNS_PER_RUN = 2  # a run is run again at most this many times after stalls
# Rough durations of a run, in seconds, on the project's 2 cores with no other work, for the first line's estimate:
# a tree's first run (a cold compile of every model along each compile path, the size row, then every scenario), a
# later run (decode on a warm cache, and a rerun), with --long a run (cold compiles, decode, consecutive calls), with
# --quick a run; and the first calls (bench.first_call: processes of their own, after the runs; --long and --quick
# only). The estimate multiplies them by (load + cores) / (2 cores) when that is above 1. Fitted on `make bench`'s run
# of 2026-12-06 23:58 (load 1.0, 9 timed calls per path: first runs 358 and 434 s, later ones 80-86 s, a rerun of
# the same) and 2026-12-07 00:20 (load 0.5-1.0, 6 calls: 309 and 443 s, 78-83 s, a rerun 89 s).
ESTIMATE_S = {
    "first": 395.0,
    "later": 82.0,
    "long": 630.0,
    "quick": 80.0,
    "first_call": 190.0,
    "first_call_long": 1500.0,
    "first_call_quick": 80.0,
}


class BenchError(Exception):
    """Reported as one line, exit status 2."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller scenarios, GPT2 only, one run per tree")
    parser.add_argument(
        "--long",
        action="store_true",
        help="the long scenarios too: a cold compile in every run (the compile cost over all runs) and the "
        "consecutive generate calls (make bench-long)",
    )
    parser.add_argument("--reps", type=int, default=None, help="runs per tree (default: 3, or 1 with --quick)")
    parser.add_argument(
        "--reruns",
        type=int,
        default=None,
        help="at most this many runs are run again after their decode stalled (default: 1, or 0 with --quick)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch's threads in each run (default: 1)")
    parser.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help='cuda: compile with mode="reduce-overhead"'
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: bench-out/<timestamp>/)")
    parser.add_argument(
        "--reaggregate",
        type=Path,
        default=None,
        metavar="DIR",
        help="runs nothing: rebuilds DIR's results.json, table and plot from its raw/ runs (after a fix to the report)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated scenarios among {', '.join(SCENARIOS)} (default: all but {', '.join(LONG_SCENARIOS)}, "
        "which --long adds)",
    )
    parser.add_argument(
        "--publish", action="store_true", help="then copy the run into docs/ and the README's figures (bench.publish)"
    )
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 1 if args.quick else 3
    if args.reruns is None:
        args.reruns = 0 if args.quick else 1
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.reruns < 0 or args.threads < 1:
        parser.error("--reruns must be at least 0 and --threads at least 1")
    if args.only:
        unknown = set(args.only.split(",")) - set(SCENARIOS)
        if unknown:
            parser.error(f"unknown scenario(s) {', '.join(sorted(unknown))}; choose among {', '.join(SCENARIOS)}")
    return args


def selected_scenarios(args: argparse.Namespace) -> list[str]:
    """The scenarios of the run: `--only`'s, else all but the long ones (all with --long or --quick)."""
    if args.only:
        return [name for name in SCENARIOS if name in args.only.split(",")]
    return [name for name in SCENARIOS if args.long or args.quick or name not in LONG_SCENARIOS]


def run_plan(args: argparse.Namespace) -> list[tuple[int, str, list[str]]]:
    """(rep, side, scenarios) of each run, in order: every scenario in a tree's first run, then only the timed ones
    (decode, and calls where selected); no later runs when nothing timed is selected."""
    scenarios = [name for name in selected_scenarios(args) if name in CHILD_SCENARIOS]
    repeated = [name for name in scenarios if name in REPEATED]
    plan = []
    for rep in range(args.reps):
        for side in report.SIDES:
            if (rep == 0 and scenarios) or repeated:
                plan.append((rep, side, scenarios if rep == 0 else repeated))
    return plan


def run_kind(rep: int, args: argparse.Namespace) -> str:
    """The kind of a run, as ESTIMATE_S names them."""
    if args.long:
        return "long"
    if rep == 0:
        return "quick" if args.quick else "first"
    return "later"


def estimate_s(args: argparse.Namespace, cores: int, load: float) -> float:
    """A rough duration of the whole run: ESTIMATE_S per run (and per rerun the budget allows), times
    (load + cores) / (2 cores) when that is above 1 (fitted on the project's runs, see ESTIMATE_S)."""
    plan = run_plan(args)
    seconds = sum(ESTIMATE_S[run_kind(rep, args)] for rep, _, _ in plan)
    if "first_call" in selected_scenarios(args):
        seconds += ESTIMATE_S["first_call_long" if args.long else "first_call_quick" if args.quick else "first_call"]
    if "decode" in selected_scenarios(args):
        seconds += ESTIMATE_S["long" if args.long else "later"] * min(args.reruns, len(plan))
    return seconds * max(1.0, (load + cores) / (2 * max(cores, 1)))


def side_command(
    side: str, src: Path, json_path: Path, args: argparse.Namespace, scenarios: list[str] | None = None
) -> tuple[list[str], dict]:
    """The command line and environment of one side's process: same interpreter, `PYTHONPATH` = the tree first."""
    command = [sys.executable, "-m", "bench.scenarios", "--side", side, "--json", str(json_path)]
    command += ["--device", args.device, "--threads", str(args.threads)]
    if args.quick:
        command.append("--quick")
    command += ["--only", ",".join(scenarios if scenarios is not None else selected_scenarios(args))]
    return command, tree_env(src, args.threads)


def side_compile_mode(device: str) -> str:
    """The compile mode of the sides' forwards, as bench.scenarios.run_side has it."""
    return "reduce-overhead" if device == "cuda" else "default"


def check_device(device: str) -> None:
    """`--device cuda` needs a CUDA build of torch and a GPU: say so in one line rather than fail in a side."""
    if device != "cuda":
        return
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"], capture_output=True, text=True
    )
    if probe.stdout.strip() != "True":
        raise BenchError(
            "--device cuda: CUDA is not available to this interpreter (torch.cuda.is_available() is False)"
        )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def run_one(
    side: str, name: str, src: Path, scenarios: list[str], args: argparse.Namespace, out: Path, cache: Path | None
) -> tuple[dict, float]:
    """One side's process: its result (checked to come from the tree under `src`) and its wall time. `cache`: the
    inductor cache to use (None: a fresh one, removed afterwards)."""
    json_path, log_path = out / "raw" / f"{name}.json", out / "logs" / f"{name}.log"
    command, env = side_command(side, src, json_path, args, scenarios)
    started = time.perf_counter()

    def on_progress(what: str) -> None:
        print(f"bench:   {what} ({time.perf_counter() - started:.0f} s in)", flush=True)

    fresh = cache is None
    cache = cache or Path(tempfile.mkdtemp(prefix="bench-inductor-"))
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    start = time.perf_counter()
    try:
        result = run_measure(command, env, json_path, log_path, src, f"the {side} side", on_progress)
    except RuntimeError as e:
        raise BenchError(str(e)) from None
    finally:
        if fresh:
            shutil.rmtree(cache, ignore_errors=True)
    wall = time.perf_counter() - start
    result.update(raw=str(json_path.relative_to(out)), log=str(log_path.relative_to(out)))
    return result, wall


def next_rerun(runs: list[dict], cap: int = RERUNS_PER_RUN) -> tuple[str, int] | None:
    """The run (side, rep) whose decode to run again next, from the summaries of the runs so far (`run_sides`'s
    `runs`: `side`, `rep`, `rerun`, `used`, and `stalled_models`, the stall share of each model the run stalled on),
    or None when no used run that stalled has been run again fewer than `cap` times.

    Per model, the used runs of each tree that stalled on it are counted: the tree with more of them is the worse
    off (on a tie, the one whose stalls on that model add up to the larger share), since its stalled runs outnumber
    the other's in the medians. The rerun goes to the worse-off tree of the model where it is furthest ahead, to its
    most stalled run there; with every model even, to the most stalled run. So neither tree gets all the reruns while
    the other's runs stay stalled."""
    kept = {(run["side"], run["rep"]): run for run in runs if run.get("used", True)}
    attempts: dict[tuple[str, int], int] = {}
    for run in runs:
        if run.get("rerun"):
            attempts[run["side"], run["rep"]] = attempts.get((run["side"], run["rep"]), 0) + 1
    count: dict[tuple[str, str], int] = {}  # (model, side) -> used runs stalled on the model
    share: dict[tuple[str, str], float] = {}  # (model, side) -> their stall shares, summed
    for (side, _), run in kept.items():
        for model, value in (run.get("stalled_models") or {}).items():
            count[model, side] = count.get((model, side), 0) + 1
            share[model, side] = share.get((model, side), 0.0) + value

    def priority(slot: tuple[str, int]) -> tuple[int, float, float]:
        side = slot[0]
        other = next(s for s in report.SIDES if s != side)
        return max(
            (
                count[model, side] - count.get((model, other), 0),
                share[model, side] - share.get((model, other), 0.0),
                value,
            )
            for model, value in kept[slot]["stalled_models"].items()
        )

    candidates = [slot for slot, run in kept.items() if run.get("stalled_models") and attempts.get(slot, 0) < cap]
    return max(candidates, key=priority, default=None)


def run_sides(args: argparse.Namespace, trees: dict[str, Path], out: Path) -> tuple[list[dict], list[dict]]:
    """Run the plan (`run_plan`), then run again the decode of the runs whose decode steps stalled
    (`report.stalled`), each time one of the tree with more stalled runs on some model (`next_rerun`), at most
    RERUNS_PER_RUN times per run and `args.reruns` times in all, keeping of each run the attempt that stalled least.
    Returns the results of every process, in the order they ran (each with `rep`, `rerun` and `used`: False for an attempt not kept), and a summary of each."""
    (out / "raw").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    plan = run_plan(args)
    # one inductor cache per tree, kept over its runs: cold in its first run, warm after (--long: fresh every run)
    caches = {side: None if args.long else Path(tempfile.mkdtemp(prefix=f"bench-inductor-{side}-")) for side in trees}
    results, runs, durations = [], [], {}
    kept: dict[tuple[str, int], int] = {}  # (side, rep) -> the index of its attempt kept

    def run(side: str, rep: int, scenarios: list[str], label: str, attempt: int) -> dict:
        name = f"{side}-{rep}" + (f"-rerun{attempt}" if attempt else "")
        print(f"bench: {label} ...", flush=True)
        result, wall = run_one(side, name, trees[side], scenarios, args, out, caches[side])
        share = report.stall_share(result)
        found = report.stalled(result)
        result.update(rep=rep, rerun=attempt > 0, used=True)
        results.append(result)
        runs.append(
            {
                "side": side,
                "rep": rep,
                "rerun": attempt > 0,
                "wall_s": wall,
                "stall_share": share,
                "stalled": report.describe_stalls(found) or None,
                "stalled_models": {model: summary["share"] for model, summary in found.items()},
                "used": True,
                "transformers_file": result["transformers_file"],
                "raw": result["raw"],
                "log": result["log"],
            }
        )
        if not attempt:
            durations.setdefault(run_kind(rep, args), []).append(wall)
        return runs[-1]

    try:
        for n, (rep, side, scenarios) in enumerate(plan):
            summary = run(side, rep, scenarios, f"run {rep + 1}/{args.reps} {side}", 0)
            kept[side, rep] = len(runs) - 1
            left = _left(plan[n + 1 :], durations, args)
            share = 100 * summary["stall_share"]
            stalled = f", stalled ({share:.0f}% of its decode time)" if summary["stalled"] else ""
            print(
                f"bench: run {rep + 1}/{args.reps} {side}: {summary['wall_s']:.1f} s{stalled}"
                + (f" (about {_minutes(left)} left)" if left else ""),
                flush=True,
            )
        for rerun in range(args.reruns):
            slot = next_rerun(runs)
            if slot is None:
                break
            side, rep = slot
            before = runs[kept[slot]]
            attempt = 1 + sum(1 for r in runs if r["rerun"] and (r["side"], r["rep"]) == slot)
            label = (
                f"rerun {rerun + 1}/{args.reruns}: {side} run {rep + 1}'s decode "
                f"(stalls: {100 * before['stall_share']:.0f}% of its decode time)"
            )
            # the scenarios timed again in every run (the decode, and those whose entries it holds)
            timed = [name for name in selected_scenarios(args) if name in REPEATED and name != "calls"]
            if not timed:
                break
            summary = run(side, rep, timed, label, attempt)
            # compared on what both timed (a first run's size row, which a rerun does not time again, left out)
            again = results[-1].get("scenarios", {}).get("decode", {})
            if summary["stall_share"] < report.stall_share(results[kept[slot]], models=again):
                before["used"] = results[kept[slot]]["used"] = False
                kept[slot] = len(runs) - 1
                verdict = "kept" + (
                    f", still stalled ({100 * summary['stall_share']:.0f}%)" if summary["stalled"] else ""
                )
            else:
                summary["used"] = results[-1]["used"] = False
                verdict = f"stalled as much or more ({100 * summary['stall_share']:.0f}%), the first one kept"
            print(f"bench: rerun {rerun + 1}: {summary['wall_s']:.1f} s, {verdict}", flush=True)
        still = [runs[index] for index in kept.values() if runs[index]["stalled"]]
        if still and "decode" in selected_scenarios(args):
            names = ", ".join(f"{run['side']} run {run['rep'] + 1}" for run in still)
            print(f"bench: still stalled, with no rerun left: {names} (the floors do not move)", flush=True)
    finally:
        for cache in caches.values():
            if cache is not None:
                shutil.rmtree(cache, ignore_errors=True)
    return results, runs


def _left(
    plan: list[tuple[int, str, list[str]]], durations: dict[str, list[float]], args: argparse.Namespace
) -> float:
    """The seconds the rest of the plan will take: per run, the mean of the runs of its kind so far, else another
    kind's scaled as ESTIMATE_S has them (0 before any run)."""
    mean = {kind: sum(seen) / len(seen) for kind, seen in durations.items() if seen}
    if not mean:
        return 0.0
    total = 0.0
    for rep, _, _ in plan:
        kind = run_kind(rep, args)
        other = kind if kind in mean else next(iter(mean))
        total += mean[other] * ESTIMATE_S[kind] / ESTIMATE_S[other]
    return total


def reaggregate(out: Path) -> int:
    """`--reaggregate`: the aggregation of a finished run, again, from the same raw runs and metadata (its
    `reaggregated` field says when); the measures are not touched."""
    previous = json.loads((out / "results.json").read_text(encoding="utf-8"))
    results = []
    for run in previous["runs"]:
        result = json.loads((out / run["raw"]).read_text(encoding="utf-8"))
        result.update(rep=run["rep"], rerun=run["rerun"], used=run["used"])
        results.append(result)
    keys = (
        "created",
        "command",
        "quick",
        "long",
        "device",
        "compile_mode",
        "reps",
        "threads",
        "rerun_budget",
        "order",
    )
    meta = {key: previous[key] for key in (*keys, "environment", "runs")}
    meta["first_call"] = previous.get("first_call_raw")
    meta["tree_src"] = {side: tree["src"] for side, tree in previous["trees"].items()}
    aggregated = report.aggregate(results, meta)
    aggregated["plot"] = "decode.png" if report.plot(aggregated, out / "decode.png") else None
    aggregated["wall_s"] = previous["wall_s"]
    aggregated["reaggregated"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    (out / "results.json").write_text(json.dumps(aggregated, indent=1) + "\n", encoding="utf-8")
    print(report.table(aggregated))
    print(f"bench: aggregated {out} again (results.json{', decode.png' if aggregated['plot'] else ''})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reaggregate:
        return reaggregate(args.reaggregate)
    started = time.perf_counter()
    cores, load = os.cpu_count() or 1, os.getloadavg()[0]
    what = "GPT2" if args.quick else "GPT2, Llama, Gemma 2 and Gemma 3 multimodal"
    later = (
        ""
        if args.long or args.quick
        else "; `make bench-long` adds the compile cost of every run, the 16-layer model, tracing, masks, the "
        "consecutive calls and the first calls"
    )
    print(
        f"bench: {args.reps} run(s) per tree of {what}, {', '.join(selected_scenarios(args))}; about "
        f"{_minutes(estimate_s(args, cores, load))} here ({cores} cores, load average {load:.1f}){later}",
        flush=True,
    )
    try:
        check_device(args.device)
        trees = {"upstream": pristine_tree() / "src", "fork": fork_tree() / "src"}
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = (args.out or ROOT / "bench-out" / stamp).resolve()
        out.mkdir(parents=True, exist_ok=True)
        results, runs = run_sides(args, trees, out)
        first_calls, failed = None, None
        if "first_call" in selected_scenarios(args):
            size = "long" if args.long else "quick" if args.quick else "full"
            try:
                first_calls = first_call.run(trees, out, args, size, rounds=3 if args.long else 1)
            except RuntimeError as e:
                # the runs before are kept: results.json is written, with the error in place of the first calls
                failed = str(e)
                first_calls = {"status": failed.splitlines()[0]}
    except BenchError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2
    meta = {
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": ["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)],
        "quick": args.quick,
        "long": args.long,
        "device": args.device,
        "compile_mode": results[0]["compile_mode"] if results else side_compile_mode(args.device),
        "reps": args.reps,
        "threads": args.threads,
        "rerun_budget": args.reruns,
        "order": [run["side"] for run in runs],
        "environment": {
            "python": platform.python_version(),
            "torch": results[0]["torch_version"] if results else (first_calls or {}).get("torch_version"),
            "platform": platform.platform(),
            "cpu_count": cores,
            "load_average": {"start": load, "end": os.getloadavg()[0]},
        },
        "tree_src": {side: str(src) for side, src in trees.items()},
        "runs": runs,
        "first_call": first_calls,
    }
    aggregated = report.aggregate(results, meta)
    aggregated["plot"] = "decode.png" if report.plot(aggregated, out / "decode.png") else None
    aggregated["wall_s"] = time.perf_counter() - started
    (out / "results.json").write_text(json.dumps(aggregated, indent=1) + "\n", encoding="utf-8")
    print()
    print(report.table(aggregated))
    print()
    if results_warnings := aggregated.get("warnings"):
        (out / "warnings.txt").write_text("\n".join(results_warnings) + "\n", encoding="utf-8")
    goals = publish.render_goals(aggregated)
    if goals:
        print("\n".join(goals))
        print()
    if args.publish and publish.main([str(out)]) != 0:
        return 2
    minutes, seconds = divmod(round(aggregated["wall_s"]), 60)
    plot = ", decode.png" if aggregated["plot"] else ""
    print(f"bench: wrote {out} (results.json{plot}) in {minutes} min {seconds} s")
    if failed:
        print(f"bench: error: {failed}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
