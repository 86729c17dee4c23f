"""`make rebase UPSTREAM=<version>`: try the patch series on another upstream release.

Fetches that release's sdist with pip, applies each patch in series order with `git am` and reports, per
patch, whether it applied. A patch that does not apply is skipped and the next ones are tried on top of the
ones that did. The result stays in `.fork-rebase/<version>/` (a work tree like `.fork`) for inspection;
nothing in `patches/` changes. Without `--sha256` the sdist cannot be verified: its sha256 is printed so that
`patches/UPSTREAM` can pin it once the series is moved over.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from .common import ROOT, Upstream, fetch_sdist, log, main_wrapper, read_series, read_upstream, sha256_of
from .materialize import build_tree


def rebase(root: Path, version: str, sha256: str | None = None) -> bool:
    current = read_upstream(root)
    target = Upstream(current.name, version, sha256.lower() if sha256 else None)
    sdist = fetch_sdist(target)
    patches = read_series(root)
    dest = root / ".fork-rebase" / version
    if dest.exists():
        shutil.rmtree(dest)
    results = build_tree(dest, target, patches, sdist, keep_going=True)
    width = max((len(p.name) for p in patches), default=0)
    print(f"series on {target.name} {version} (sdist sha256 {sha256_of(sdist)}):")
    for result in results:
        status = "applied" if result.applied else "FAILED"
        print(f"  {result.patch.name:<{width}}  {status}")
        if not result.applied:
            print("    " + result.message.replace("\n", "\n    "))
    ok = all(r.applied for r in results)
    print(f"{sum(r.applied for r in results)}/{len(patches)} patches applied; work tree in {dest.relative_to(root)}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="upstream release to rebase onto, e.g. 5.24.0")
    parser.add_argument("--sha256", help="expected sha256 of that release's sdist")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args()
    if not rebase(args.root.resolve(), args.version, args.sha256):
        log("some patches need rebasing by hand")
        return 1
    return 0


if __name__ == "__main__":
    main_wrapper(main)
