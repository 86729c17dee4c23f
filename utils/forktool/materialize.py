"""`make fork`: build the work tree `.fork/` from the pinned sdist and the patch series, and link it into the repo.

The work tree is a git repository: one commit `upstream <name> <version>` holding the sdist's contents (tagged
`upstream`), then one commit per patch, applied with `git am`. `src/transformers` and `tests` at the repository
root are symbolic links into it, so an edit made there is an edit of the work tree, visible to `git -C .fork
status` and never a second copy that could drift.

Running it again with the same UPSTREAM and patches does nothing. When they changed (a `git pull` brought new
patches), the work tree is rebuilt; it refuses to throw away commits or edits that no patch holds yet unless
`--force` is given.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .common import (
    ROOT,
    UPSTREAM_TAG,
    WORK_BRANCH,
    WORK_TREE_EXCLUDES,
    ForkError,
    Upstream,
    extract_sdist,
    fetch_sdist,
    git,
    log,
    main_wrapper,
    read_series,
    read_upstream,
)


STATE_FILE = "fork-state.json"
# Links at the repository root -> their target inside the work tree.
LINKS = {"src/transformers": "src/transformers", "tests": "tests"}


@dataclass
class PatchResult:
    patch: Path
    applied: bool
    message: str = ""


def series_stamp(upstream: Upstream, patches: list[Path]) -> str:
    """A digest of everything the work tree is built from."""
    digest = hashlib.sha256(f"{upstream.name} {upstream.version} {upstream.sha256}\n".encode())
    for patch in patches:
        digest.update(patch.name.encode() + b"\0" + patch.read_bytes() + b"\0")
    return digest.hexdigest()


def build_tree(
    dest: Path, upstream: Upstream, patches: list[Path], sdist: Path, keep_going: bool = False
) -> list[PatchResult]:
    """Create `dest` as a git work tree: the pristine sdist commit, then each patch applied with `git am`.

    Stops at the first patch that does not apply (its `git am` aborted) unless `keep_going`, in which case a
    failing patch is skipped and the next ones are tried on top of the ones that applied.
    """
    dest.mkdir(parents=True)
    extract_sdist(sdist, dest)
    git(dest, "init", "--quiet", "--initial-branch", WORK_BRANCH)
    (dest / ".git" / "info").mkdir(exist_ok=True)
    (dest / ".git" / "info" / "exclude").write_text("\n".join(WORK_TREE_EXCLUDES) + "\n", encoding="utf-8")
    git(dest, "add", "--all")
    message = (
        f"upstream {upstream.name} {upstream.version}\n\n"
        f"Pristine contents of {upstream.sdist_name} (sha256 {upstream.sha256}).\n"
    )
    git(dest, "commit", "--quiet", "--no-verify", "--message", message)
    git(dest, "tag", UPSTREAM_TAG)

    results = []
    for patch in patches:
        applied = git(dest, "am", "--quiet", str(patch), check=False)
        if applied.returncode == 0:
            results.append(PatchResult(patch, True))
            continue
        error = (applied.stderr or applied.stdout).strip()
        git(dest, "am", "--skip" if keep_going else "--abort", check=False)
        results.append(PatchResult(patch, False, error))
        if not keep_going:
            break
    return results


def read_state(work: Path) -> dict:
    path = work / ".git" / STATE_FILE
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def materialize(root: Path = ROOT, work: Path | None = None, force: bool = False) -> Path:
    """Bring `work` (default `<root>/.fork`) and the root links up to date; return the work tree's path."""
    work = work or root / ".fork"
    upstream = read_upstream(root)
    patches = read_series(root)
    stamp = series_stamp(upstream, patches)

    if (work / ".git").is_dir():
        state = read_state(work)
        head = git(work, "rev-parse", "HEAD", check=False).stdout.strip()
        if state.get("stamp") == stamp:
            link_work_tree(root, work)
            log(f"{work.name} is up to date ({upstream.name} {upstream.version} + {len(patches)} patches)")
            return work
        dirty = git(work, "status", "--porcelain").stdout.strip()
        if not force and (dirty or head != state.get("head")):
            raise ForkError(
                f"the patches changed, but {work} holds commits or edits that no patch holds yet. "
                "Export them first (`make patches`), or rebuild anyway with `make fork FORCE=1`."
            )
    elif work.exists():
        raise ForkError(f"{work} exists and is not a git work tree; move it away first")

    sdist = fetch_sdist(upstream)
    log(f"building {work.name}: {upstream.sdist_name} + {len(patches)} patches")
    new = work.with_name(work.name + ".new")
    if new.exists():
        shutil.rmtree(new)
    results = build_tree(new, upstream, patches, sdist)
    failed = [r for r in results if not r.applied]
    if failed:
        shutil.rmtree(new)
        raise ForkError(f"{failed[0].patch.name} does not apply with `git am`:\n{failed[0].message}")
    head = git(new, "rev-parse", "HEAD").stdout.strip()
    (new / ".git" / STATE_FILE).write_text(json.dumps({"stamp": stamp, "head": head}) + "\n", encoding="utf-8")

    old = work.with_name(work.name + ".old")
    if work.exists():
        os.replace(work, old)
    os.replace(new, work)
    if old.exists():
        shutil.rmtree(old)
    link_work_tree(root, work)
    log(f"{work.name} at {head[:12]}")
    return work


def link_work_tree(root: Path, work: Path) -> None:
    """Make `src/transformers` and `tests` at the root relative symbolic links into the work tree."""
    for link_path, target_path in LINKS.items():
        link = root / link_path
        target = Path(os.path.relpath(work / target_path, link.parent))
        if link.is_symlink():
            if Path(os.readlink(link)) == target:
                continue
            link.unlink()
        elif link.exists():
            raise ForkError(f"{link} exists and is not a link into the work tree; move it away first")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target, target_is_directory=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the work tree holds unexported work")
    args = parser.parse_args()
    materialize(args.root.resolve(), force=args.force)
    return 0


if __name__ == "__main__":
    main_wrapper(main)
