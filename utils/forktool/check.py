"""`make check`: the work tree, the patches and upstream's lint rules agree.

Fails when
- a patch does not apply with `git am`, in series order, onto the pristine sdist tree;
- a patch does not apply with `git am -3` to the pristine tree alone, or on the patches its `Depends-on:`
  trailers name (the apply part of `make standalone`, see `standalone.py`);
- `patches/` holds a patch the series does not list;
- the work tree `.fork` is not what pristine + patches build (its commits differ from the patches, it holds
  edits no patch holds, or `src/transformers` / `tests` are not links into it);
- the ruff settings in `pyproject.toml` are not upstream's;
- a `# Copied from` copy in, or of, a file the series touches is out of sync (see `copies.py`);
- ruff, with upstream's settings, finds a problem in a Python file the series touches, or in the fork tooling.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from .common import (
    ROOT,
    UPSTREAM_TAG,
    ForkError,
    Upstream,
    fetch_sdist,
    git,
    log,
    main_wrapper,
    read_series,
    read_upstream,
)
from .copies import check_copies
from .export import format_patches
from .materialize import LINKS, build_tree
from .standalone import check_standalone


# Fork files linted along with the ones the series touches.
TOOLING = ["setup.py", "conftest.py", "utils"]


def tree_listing(work: Path) -> dict[str, str]:
    """`path -> mode and blob id` of HEAD."""
    out = git(work, "ls-tree", "-r", "--full-tree", "HEAD").stdout
    listing = {}
    for line in out.splitlines():
        meta, path = line.split("\t", 1)
        mode, _, blob = meta.split()
        listing[path] = f"{mode} {blob}"
    return listing


def find_ruff(root: Path) -> str:
    for candidate in (root / ".venv" / "bin" / "ruff", Path(sys.executable).parent / "ruff"):
        if candidate.exists():
            return str(candidate)
    found = shutil.which("ruff")
    if not found:
        raise ForkError("ruff is not installed: run `make install`")
    return found


def check(root: Path = ROOT, work: Path | None = None) -> list[str]:
    """Return the problems found, an empty list when everything agrees."""
    work = work or root / ".fork"
    problems = []
    upstream = read_upstream(root)
    patches = read_series(root)
    listed = {p.name for p in patches}
    for stray in sorted((root / "patches").glob("*.patch")):
        if stray.name not in listed:
            problems.append(f"patches/{stray.name} is not listed in patches/series")

    sdist = fetch_sdist(upstream)
    with tempfile.TemporaryDirectory() as tmp:
        expected = Path(tmp) / "tree"
        results = build_tree(expected, upstream, patches, sdist)
        for result in results:
            if not result.applied:
                problems.append(f"{result.patch.name} does not apply with `git am` onto the pristine tree:\n"
                                f"{result.message}")  # fmt: skip
        if len(results) < len(patches) or problems:
            return problems

        touched = git(expected, "diff", "--name-only", "--diff-filter=d", UPSTREAM_TAG, "HEAD").stdout.split()
        problems += _check_work_tree(root, work, expected)
        problems += _check_ruff_settings(root, expected)
        problems += _check_copies(expected, touched, Path(tmp) / "pristine")
        if not problems:
            problems += _check_ruff(root, [f for f in touched if f.endswith(".py")])
        problems += _check_standalone(upstream, patches, sdist, Path(tmp) / "standalone")
    return problems


def _check_work_tree(root: Path, work: Path, expected: Path) -> list[str]:
    if not (work / ".git").is_dir():
        return [f"no work tree at {work}: run `make fork`"]
    problems = []
    dirty = git(work, "status", "--porcelain").stdout.rstrip()
    if dirty:
        problems.append(f"{work.name} has edits that no patch holds (commit them, then `make patches`):\n{dirty}")
    have, want = tree_listing(work), tree_listing(expected)
    differ = sorted(path for path in have.keys() | want.keys() if have.get(path) != want.get(path))
    if differ:
        shown = "\n".join(f"  {path}" for path in differ[:20]) + ("\n  ..." if len(differ) > 20 else "")
        problems.append(
            f"{work.name} is not pristine + patches; these files differ (run `make patches` to export "
            f"committed work, or `make fork FORCE=1` to rebuild):\n{shown}"
        )
    else:
        with tempfile.TemporaryDirectory() as tmp:
            mails = format_patches(work, Path(tmp))
            series = read_series(root)
            if [m.name for m in mails] != [p.name for p in series] or any(
                m.read_bytes() != p.read_bytes() for m, p in zip(mails, series)
            ):
                problems.append(
                    f"the commits in {work.name} differ from patches/ (messages or split): run `make patches`"
                )
    for link_path, target_path in LINKS.items():
        link = root / link_path
        if not link.is_symlink() or Path(os.path.realpath(link)) != (work / target_path).resolve():
            problems.append(f"{link_path} is not a link to {work.name}/{target_path}: run `make fork`")
    return problems


def _check_copies(expected: Path, touched: list[str], pristine: Path) -> list[str]:
    """`# Copied from` copies the series puts out of sync (differences upstream already has are not its doing)."""
    pristine.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(expected), "archive", UPSTREAM_TAG, "src/transformers"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(pristine)], input=archive.stdout, check=True)
    before = set(check_copies(pristine, touched))
    return [problem for problem in check_copies(expected, touched) if problem not in before]


def _check_standalone(upstream: Upstream, patches: list[Path], sdist: Path, tree: Path) -> list[str]:
    """Each patch applies alone to pristine, or on the patches it declares.

    In a pristine tree of its own: the expected tree holds the blobs of every patch, with which `git am -3` could
    merge a patch that a checkout of the release cannot take.
    """
    build_tree(tree, upstream, [], sdist)
    return [
        f"{r.patch.name} does not apply with `git am -3` to pristine alone or on its Depends-on patches: {r.error}"
        for r in check_standalone(tree, patches)
        if r.error
    ]


def _check_ruff_settings(root: Path, expected: Path) -> list[str]:
    ours = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("tool", {}).get("ruff")
    theirs = tomllib.loads((expected / "pyproject.toml").read_text(encoding="utf-8")).get("tool", {}).get("ruff")
    if ours != theirs:
        return ["[tool.ruff] in pyproject.toml differs from upstream's: copy it from the work tree's pyproject.toml"]
    return []


def _check_ruff(root: Path, touched: list[str]) -> list[str]:
    ruff = find_ruff(root)
    paths = [p for p in [*touched, *TOOLING] if (root / p).exists()]
    problems = []
    # No cache: what ruff resolves as first-party depends on files outside the ones checked
    for args in (["check", "--no-fix", "--no-cache"], ["format", "--check", "--no-cache"]):
        cmd = [ruff, *args, "--config", str(root / "pyproject.toml"), *paths]
        result = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        if result.returncode != 0:
            problems.append(f"`ruff {' '.join(args)}` fails:\n{(result.stdout + result.stderr).strip()}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args()
    problems = check(args.root.resolve())
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    if problems:
        return 1
    log(f"check passed: {len(read_series(args.root.resolve()))} patches, work tree and lint agree")
    return 0


if __name__ == "__main__":
    main_wrapper(main)
