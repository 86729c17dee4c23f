"""`python -m bench` (`make bench`): the fork against pristine upstream, side by side, in one run.

Runs `bench.scenarios` in one process per tree and repetition, alternating (upstream, fork, upstream, fork...),
with this interpreter and `PYTHONPATH` set to the tree's `src`; each process gets a fresh inductor cache so that the
compile cost is a cold one. Writes `results.json`, `decode.png`, the sides' raw results and logs into the output
folder, prints the table, and names the folder in its last line.
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

from . import report
from .trees import fork_tree, pristine_tree


SCENARIOS = ("decode", "calls", "recompiles", "tracing", "mask_matrix")  # as bench.scenarios.SCENARIOS


class BenchError(Exception):
    """Reported as one line, exit status 2."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller scenarios, GPT2 only, one run per tree")
    parser.add_argument("--reps", type=int, default=None, help="runs per tree (default: 5, or 1 with --quick)")
    parser.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help='cuda: compile with mode="reduce-overhead"'
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: bench-out/<timestamp>/)")
    parser.add_argument(
        "--only", default=None, help=f"comma-separated scenarios among {', '.join(SCENARIOS)} (default: all)"
    )
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 1 if args.quick else 5
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.only:
        unknown = set(args.only.split(",")) - set(SCENARIOS)
        if unknown:
            parser.error(f"unknown scenario(s) {', '.join(sorted(unknown))}; choose among {', '.join(SCENARIOS)}")
    return args


def side_command(side: str, src: Path, json_path: Path, args: argparse.Namespace) -> tuple[list[str], dict]:
    """The command line and environment of one side's process: same interpreter, `PYTHONPATH` = the tree first."""
    command = [sys.executable, "-m", "bench.scenarios", "--side", side, "--json", str(json_path)]
    command += ["--device", args.device]
    if args.quick:
        command.append("--quick")
    if args.only:
        command += ["--only", args.only]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT / "utils")])
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Compile in the side's process: no pool of inductor workers left competing with the timed calls for the cores.
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return command, env


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


def _inside(file: str, src: Path) -> bool:
    return Path(file).resolve().is_relative_to((src / "transformers").resolve())


def run_sides(args: argparse.Namespace, trees: dict[str, Path], out: Path) -> tuple[list[dict], list[dict]]:
    """Alternate the sides `args.reps` times; return their results and a summary of each run, in run order."""
    (out / "raw").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    results, runs = [], []
    for rep in range(args.reps):
        for side in report.SIDES:
            json_path = out / "raw" / f"{side}-{rep}.json"
            log_path = out / "logs" / f"{side}-{rep}.log"
            command, env = side_command(side, trees[side], json_path, args)
            inductor_cache = Path(tempfile.mkdtemp(prefix="bench-inductor-"))
            env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache)
            print(f"bench: run {rep + 1}/{args.reps} {side} ...", end=" ", flush=True)
            start = time.perf_counter()
            try:
                with open(log_path, "w", encoding="utf-8") as log:
                    code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
            finally:
                shutil.rmtree(inductor_cache, ignore_errors=True)
            wall = time.perf_counter() - start
            print(f"{wall:.1f} s", flush=True)
            if code != 0:
                tail = "\n".join(log_path.read_text(encoding="utf-8").splitlines()[-15:])
                raise BenchError(f"the {side} side failed (exit status {code}); its log {log_path} ends with:\n{tail}")
            result = json.loads(json_path.read_text(encoding="utf-8"))
            if not _inside(result["transformers_file"], trees[side]):
                raise BenchError(
                    f"the {side} side imported {result['transformers_file']}, not the tree under {trees[side]}"
                )
            results.append(result)
            runs.append(
                {
                    "side": side,
                    "rep": rep,
                    "wall_s": wall,
                    "transformers_file": result["transformers_file"],
                    "raw": str(json_path.relative_to(out)),
                    "log": str(log_path.relative_to(out)),
                }
            )
    return results, runs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        check_device(args.device)
        trees = {"upstream": pristine_tree() / "src", "fork": fork_tree() / "src"}
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        out = (args.out or ROOT / "bench-out" / stamp).resolve()
        out.mkdir(parents=True, exist_ok=True)
        results, runs = run_sides(args, trees, out)
    except BenchError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2
    meta = {
        "created": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": ["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)],
        "quick": args.quick,
        "device": args.device,
        "compile_mode": results[0]["compile_mode"],
        "reps": args.reps,
        "order": [run["side"] for run in runs],
        "environment": {
            "python": platform.python_version(),
            "torch": results[0]["torch_version"],
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
        },
        "tree_src": {side: str(src) for side, src in trees.items()},
        "runs": runs,
    }
    aggregated = report.aggregate(results, meta)
    aggregated["plot"] = "decode.png" if report.plot(aggregated, out / "decode.png") else None
    aggregated["wall_s"] = time.perf_counter() - started
    (out / "results.json").write_text(json.dumps(aggregated, indent=1) + "\n", encoding="utf-8")
    print()
    print(report.table(aggregated))
    print()
    print(f"bench: wrote {out} (results.json{', decode.png' if aggregated['plot'] else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
