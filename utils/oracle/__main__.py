"""`python -m oracle` (`make oracle`): the model matrix under pristine upstream and under the fork, compared exactly.

Runs `oracle.matrix` for each tree in its own process (the same interpreter, `PYTHONPATH` = the tree first), with
the models' forward as it is and replaced by a wrapper (`--wrap`), then compares the sides of each mode. Writes the
results and `report.txt` into `oracle-out/<timestamp>/`, prints the report, and exits 1 when a run differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from bench.trees import fork_tree, pristine_tree
from forktool.common import ROOT

from oracle.compare import compare, report


MODES = {"plain": [], "wrap": ["--wrap"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oracle", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help="comma-separated model types (default: every mapped one)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: oracle-out/<timestamp>)")
    args = parser.parse_args(argv)
    out = args.out or ROOT / "oracle-out" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    trees = {"upstream": pristine_tree() / "src", "fork": fork_tree() / "src"}
    reports, different = [], 0
    for mode, flags in MODES.items():
        results = {}
        for side, src in trees.items():
            path = out / f"{side}-{mode}.pt"
            command = [sys.executable, "-m", "oracle.matrix", "--tree", side, "--out", str(path), *flags]
            if args.only:
                command += ["--only", args.only]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT / "utils")])}
            with (out / f"{side}-{mode}.log").open("w", encoding="utf-8") as log:
                code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
            if code != 0:
                print(f"oracle: the {side} side ({mode}) exited with {code}; see {out / f'{side}-{mode}.log'}")
                return 2
            results[side] = torch.load(path, weights_only=False)
        reports.append(f"[{mode}]\n" + report(results["upstream"], results["fork"]))
        different += len(compare(results["upstream"], results["fork"])["differences"])
    text = "\n\n".join(reports)
    (out / "report.txt").write_text(text + "\n", encoding="utf-8")
    print(text)
    print(f"oracle: wrote {out}")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
