"""`python -m oracle` (`make oracle`): the model matrix and the case families under pristine upstream and under the
fork, compared.

Runs `oracle.matrix` for each tree in its own process (the same interpreter, `PYTHONPATH` = the tree first; both
trees at once), with the models' forward as it is and replaced by a wrapper (`--wrap`), then compares the sides of
each mode exactly; then `oracle.sliding` (the sliding window and chunked families compiled past their window,
`oracle.compare.compare_sliding`) and `oracle.families` for each tree, compared case by case
(`oracle.compare.judge`). Writes the results and `report.txt`
into `oracle-out/<timestamp>/`, prints the report, and exits 1 when a run differs.

The trees default to the pristine sdist extracted into `.bench/` and this repository's `src/`; `--pristine-tree` and
`--fork-tree` take another folder holding `transformers/` (a `src/` folder) or a checkout holding `src/transformers/`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from bench.trees import fork_tree, pristine_tree
from forktool.common import ROOT

from oracle import FAMILIES
from oracle.compare import compare, family_differences, report, report_families, report_sliding, sliding_differences


MODES = {"plain": [], "wrap": ["--wrap"]}


def source_folder(path: Path) -> Path:
    """The folder to put on `PYTHONPATH` for the tree at `path`: `path` itself or its `src/`."""
    for folder in (path, path / "src"):
        if (folder / "transformers" / "__init__.py").is_file():
            return folder.resolve()
    raise argparse.ArgumentTypeError(f"{path} holds neither transformers/ nor src/transformers/")


def run_sides(module: str, trees: dict[str, Path], out: Path, name: str, flags: list[str]) -> dict:
    """`run_side` for every tree at once (each in its own process), keyed by side."""
    with ThreadPoolExecutor(max_workers=len(trees)) as pool:
        futures = {
            side: pool.submit(run_side, module, side, src, out, f"{side}-{name}", flags) for side, src in trees.items()
        }
        return {side: future.result() for side, future in futures.items()}


def run_side(module: str, side: str, src: Path, out: Path, name: str, flags: list[str]) -> dict | None:
    """Runs `python -m <module>` for one tree; its results, or None (after saying so) when it failed."""
    path = out / f"{name}.pt"
    command = [sys.executable, "-m", module, "--tree", side, "--out", str(path), *flags]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT / "utils")])}
    with (out / f"{name}.log").open("w", encoding="utf-8") as log:
        code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    if code != 0:
        print(f"oracle: the {side} side ({module}) exited with {code}; see {out / f'{name}.log'}")
        return None
    return torch.load(path, weights_only=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oracle", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated model types (default: every mapped one)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: oracle-out/<timestamp>)")
    parser.add_argument("--pristine-tree", type=Path, default=None, help="the pristine tree (default: the sdist's)")
    parser.add_argument("--fork-tree", type=Path, default=None, help="the fork's tree (default: this repository)")
    parser.add_argument("--no-matrix", action="store_true", help="run the case families only")
    parser.add_argument(
        "--no-sliding", action="store_true", help="skip the sliding window families compiled past their window"
    )
    parser.add_argument(
        "--families", default=",".join(FAMILIES), help="comma-separated case families, or 'none' (default: all)"
    )
    parser.add_argument("--family-models", default=None, help="comma-separated model types the families use")
    args = parser.parse_args(argv)
    families = [] if args.families == "none" else args.families.split(",")
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        parser.error(f"--families: unknown: {', '.join(unknown)} (known: {', '.join(FAMILIES)})")
    try:
        trees = {
            "upstream": source_folder(args.pristine_tree or pristine_tree() / "src"),
            "fork": source_folder(args.fork_tree or fork_tree()),
        }
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    out = args.out or ROOT / "oracle-out" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    reports, different = [], 0
    for mode, flags in {} if args.no_matrix else MODES.items():
        flags = [*flags, "--only", args.only] if args.only else flags
        results = run_sides("oracle.matrix", trees, out, mode, flags)
        if None in results.values():
            return 2
        reports.append(f"[{mode}]\n" + report(results["upstream"], results["fork"]))
        different += len(compare(results["upstream"], results["fork"])["differences"])
    if not args.no_matrix and not args.no_sliding:
        results = run_sides("oracle.sliding", trees, out, "sliding", ["--only", args.only] if args.only else [])
        if None in results.values():
            return 2
        reports.append(
            "[sliding window and chunked families, compiled past their window]\n"
            + report_sliding(results["upstream"], results["fork"])
        )
        different += sliding_differences(results["upstream"], results["fork"])
    if families:
        flags = ["--only", ",".join(families)] + (["--models", args.family_models] if args.family_models else [])
        results = run_sides("oracle.families", trees, out, "families", flags)
        if None in results.values():
            return 2
        reports.append("[families]\n" + report_families(results["upstream"], results["fork"]))
        different += family_differences(results["upstream"], results["fork"])
    text = "\n\n".join(reports)
    (out / "report.txt").write_text(text + "\n", encoding="utf-8")
    print(text)
    print(f"oracle: wrote {out}")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
