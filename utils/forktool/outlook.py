"""`make upstream-outlook`: how the series stands against the newest upstream release, changing nothing.

Asks pip for the newest release of the pinned package (`UPSTREAM=x.y.z` names another), then does what `make
rebase` does in a temporary directory and reports, per patch, whether it `applies` as it is, `merges` in three
ways, `conflicts` (with the files), or is empty on that release (upstream carries it). To report on every patch,
a conflicting patch is left out and the ones after it are tried without it. Nothing in the repository changes;
the release's sdist lands in the sdist cache, its sha256 printed (not verified: nothing pins it yet).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import ROOT, ForkError, git, log, main_wrapper, pip_error_summary, read_upstream
from .rebase import after_rebase_step, in_progress, patch_states, run_git, start


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
        state = start(root, version, None, work)
        while in_progress(work):
            # record the conflict, leave the patch out and go on, to see the patches after it
            result = run_git(work, "rebase", "--skip", env={"GIT_EDITOR": "true"})
            after_rebase_step(work, state, result)
        states = patch_states(work, state)
        touched = [
            set(git(work, "diff", "--name-only", f"{p['commit']}^", p["commit"]).stdout.split())
            for p in state["patches"]
        ]
    labels = {"applied": "applies", "merged": "merges", "empty": f"empty on {version} (upstream carries it)"}
    width = max((len(s.name) for s in states), default=0)
    lines = []
    for i, s in enumerate(states):
        if s.kind == "skipped":
            # a conflict may come from an earlier patch left out rather than from upstream: name those
            left_out = [
                states[j].name[:4] for j in range(i) if states[j].kind == "skipped" and touched[j] & set(s.files)
            ]
            label = f"conflicts: {', '.join(s.files)}" + (
                f" (also changed by {', '.join(left_out)}, left out)" if left_out else ""
            )
        else:
            label = labels[s.kind]
        lines.append(f"{s.name:<{width}}  {label}")
    print(
        f"series ({current.name} {current.version}) against {current.name} {version}, sdist sha256 {state['sha256']}:"
    )
    for line in lines:
        print(f"  {line}")
    counts = {kind: sum(s.kind == kind for s in states) for kind in ("applied", "merged", "skipped", "empty")}
    print(
        f"{counts['applied']} apply, {counts['merged']} merge, {counts['skipped']} conflict, {counts['empty']} empty"
        + (" (each patch after a conflict was tried without the conflicting ones)" if counts["skipped"] else "")
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
