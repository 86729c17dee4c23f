"""`make patches`: regenerate `patches/NNNN-*.patch` and `patches/series` from the work tree's commits.

One patch per commit after the `upstream` tag, written by `git format-patch` with byte-stable output: no
numbering in the subject (adding a patch does not rewrite the others), zero commit hashes, no version
signature, fixed-length blob abbreviations, and git's user and system configuration ignored. The author date
comes from the commit, so exporting an unchanged queue rewrites no byte.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from .common import ROOT, UPSTREAM_TAG, ForkError, git, log, main_wrapper, read_series, read_upstream
from .materialize import STATE_FILE, series_stamp


FORMAT_PATCH = [
    "-c", "core.abbrev=12",
    "format-patch", "--quiet", "--no-numbered", "--zero-commit", "--no-signature", "--no-cover-letter",
    "--no-thread", "--stat=72",
]  # fmt: skip


def format_patches(work: Path, out: Path) -> list[Path]:
    """Write one mail per commit `upstream..HEAD` of `work` into `out`; return them in order."""
    if git(work, "rev-parse", "--verify", "--quiet", UPSTREAM_TAG, check=False).returncode != 0:
        raise ForkError(f"{work} has no `{UPSTREAM_TAG}` tag: is it a work tree made by `make fork`?")
    merges = git(work, "rev-list", "--merges", f"{UPSTREAM_TAG}..HEAD").stdout.split()
    if merges:
        raise ForkError(f"{work} has merge commits after `{UPSTREAM_TAG}`; the series must be linear")
    git(work, *FORMAT_PATCH, "--output-directory", str(out), f"{UPSTREAM_TAG}..HEAD")
    return sorted(out.glob("*.patch"))


def export(root: Path = ROOT, work: Path | None = None) -> list[str]:
    """Regenerate `patches/` from the work tree; return the names of the files that changed."""
    work = work or root / ".fork"
    if not (work / ".git").is_dir():
        raise ForkError(f"no work tree at {work}: run `make fork` first")
    dirty = git(work, "status", "--porcelain").stdout.strip()
    if dirty:
        raise ForkError(f"{work} has uncommitted changes; commit them into a patch first:\n{dirty}")

    patches_dir = root / "patches"
    changed = []
    with tempfile.TemporaryDirectory() as tmp:
        new = format_patches(work, Path(tmp))
        new_names = [p.name for p in new]
        for old in sorted(patches_dir.glob("*.patch")):
            if old.name not in new_names:
                old.unlink()
                changed.append(old.name)
        for patch in new:
            target = patches_dir / patch.name
            data = patch.read_bytes()
            if not target.exists() or target.read_bytes() != data:
                target.write_bytes(data)
                changed.append(patch.name)
    series = "".join(f"{name}\n" for name in new_names)
    series_path = patches_dir / "series"
    if not series_path.exists() or series_path.read_text(encoding="utf-8") != series:
        series_path.write_text(series, encoding="utf-8")
        changed.append("series")

    # The work tree now is what the series builds: record it, so that `make fork` keeps it as it is.
    head = git(work, "rev-parse", "HEAD").stdout.strip()
    stamp = series_stamp(read_upstream(root), read_series(root))
    (work / ".git" / STATE_FILE).write_text(json.dumps({"stamp": stamp, "head": head}) + "\n", encoding="utf-8")
    return changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args()
    changed = export(args.root.resolve())
    log(f"patches/: {', '.join(changed)} changed" if changed else "patches/ unchanged")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
