"""`make upstream-outlook`: how the series stands against the newest upstream release, changing nothing.

Asks pip for the newest release of the pinned package (`UPSTREAM=x.y.z` names another), builds in a temporary
directory what `make rebase` builds (the pinned release with the series, the new release on top of it), and
picks each patch in turn onto the new release with the three-way merge `git rebase` would make. Reports, per
patch, whether it `applies` as it is, `merges` in three ways, `conflicts` (with the files), or is empty on that
release (upstream carries it). To report on every patch, a conflicting patch is left out and the ones after it
are tried without it; a conflict that also happens on the old release without the patches left out names the
ones it needs (`needs 0003, left out`), any other is a conflict with upstream's changes. Nothing in the repository changes;
the release's sdist lands in the sdist cache, its sha256 printed (not verified: nothing pins it yet).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import ROOT, ForkError, log, main_wrapper, pip_error_summary, read_upstream
from .rebase import forecast, start


def newest_version(name: str) -> str:
    """The newest release of `name` on the package index pip is configured with (pre-releases left out)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check", name]
    result = subprocess.run(cmd, capture_output=True, text=True)
    match = re.search(r"^Available versions:\s*([^\s,]+)", result.stdout, re.MULTILINE)
    if result.returncode != 0 or not match:
        raise ForkError(f"`pip index versions {name}` failed: {pip_error_summary(result.stderr or result.stdout)}")
    return match[1]


def outlook(root: Path, version: str | None = None) -> list[str]:
    """Print the report; return its per-patch lines (`<patch>  <state>`)."""
    current = read_upstream(root)
    version = version or newest_version(current.name)
    if version == current.version:
        print(f"the series is on {current.name} {version}, the newest release: nothing to rebase")
        return []
    with tempfile.TemporaryDirectory(prefix="fork-outlook-") as tmp:
        work = Path(tmp) / version
        state = start(root, version, None, work, run=False)
        states = forecast(work, state, 0, state["new_commit"], [])
    labels = {"applied": "applies", "merged": "merges", "empty": f"empty on {version} (upstream carries it)"}
    width = max((len(s.name) for s in states), default=0)
    lines = []
    for s in states:
        if s.kind == "conflict":
            label = f"conflicts: {', '.join(s.files)}" + (f" ({s.note})" if s.note else "")
        else:
            label = labels[s.kind]
        lines.append(f"{s.name:<{width}}  {label}")
    print(
        f"series ({current.name} {current.version}) against {current.name} {version}, sdist sha256 {state['sha256']}:"
    )
    for line in lines:
        print(f"  {line}")
    counts = {kind: sum(s.kind == kind for s in states) for kind in ("applied", "merged", "conflict", "empty")}
    print(
        f"{counts['applied']} apply, {counts['merged']} merge, {counts['conflict']} conflict, {counts['empty']} empty"
        + (" (each patch after a conflict was tried without the conflicting ones)" if counts["conflict"] else "")
    )
    print(f"To move the series: make rebase UPSTREAM={version} SHA256=<sha256 from the package index>")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", help="the release to look at (default: the newest on the package index)")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args()
    outlook(args.root.resolve(), args.version)
    log("nothing in the repository changed")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
