"""`make bisect`: the series is bisectable, i.e. after patches 1..k the tests that patches 1..k add pass.

For each k, builds pristine + the first k patches in a scratch work tree and runs, against that tree's
`src/transformers`, the test files the first k patches add or change. Reports per patch; fails on the first
prefix whose tests fail. `--from K` starts at the prefix that ends with patch K (the earlier prefixes unchanged
since they last passed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import ROOT, UPSTREAM_TAG, ForkError, fetch_sdist, git, log, main_wrapper, read_series, read_upstream
from .materialize import build_tree


def bisect(root: Path, pytest_args: list[str], first: int = 1) -> bool:
    upstream, patches = read_upstream(root), read_series(root)
    if not 1 <= first <= len(patches):
        raise ForkError(f"--from {first}: the series has patches 1 to {len(patches)}")
    sdist = fetch_sdist(upstream)
    ok = True
    for k in range(first, len(patches) + 1):
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            build_tree(tree, upstream, patches[:k], sdist)
            changed = git(tree, "diff", "--name-only", "--diff-filter=d", UPSTREAM_TAG, "HEAD", "--", "tests").stdout
            tests = [str(tree / path) for path in changed.split() if Path(path).name.startswith("test_")]
            if not tests:
                print(f"{patches[k - 1].name}: no tests")
                continue
            env = {**os.environ, "PYTHONPATH": str(tree / "src")}
            # the repository's pytest settings (markers), the scratch tree's code and tests
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(root / "pyproject.toml"),
                   "--rootdir", str(root), *pytest_args, *tests]  # fmt: skip
            result = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
            summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
            print(f"after {patches[k - 1].name}: {len(tests)} test files, {summary}")
            if result.returncode != 0:
                print(result.stdout[-3000:])
                ok = False
                break
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    parser.add_argument(
        "--from", dest="first", type=int, default=1, help="the first prefix to run: patches 1..K (default: 1)"
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments, e.g. -n 2")
    args = parser.parse_args()
    if not bisect(args.root.resolve(), args.pytest_args, args.first):
        log("the series is not bisectable")
        return 1
    return 0


if __name__ == "__main__":
    main_wrapper(main)
