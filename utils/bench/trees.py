"""The two trees the benchmark imports: the pristine upstream sdist (extracted once, here) and the fork."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from forktool.common import ROOT, extract_sdist, fetch_sdist, read_upstream, sha256_of


BENCH_DIR = ROOT / ".bench"


def pristine_tree(root: Path = ROOT, bench_dir: Path | None = None) -> Path:
    """The pristine upstream tree `<bench_dir>/upstream-<version>/`, extracted from the verified sdist once.

    Idempotent: a `.complete` marker holding the sdist's sha256 says the folder is whole; a partial or stale folder
    is replaced. The extraction goes to a temporary folder first and is renamed into place.
    """
    bench_dir = bench_dir or root / ".bench"
    upstream = read_upstream(root)
    sdist = fetch_sdist(upstream)
    digest = sha256_of(sdist)
    dest = bench_dir / f"upstream-{upstream.version}"
    marker = dest / ".complete"
    if marker.is_file() and marker.read_text(encoding="utf-8").strip() == digest:
        return dest
    bench_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".upstream-{upstream.version}.", dir=bench_dir))
    try:
        extract_sdist(sdist, tmp)
        (tmp / ".complete").write_text(digest + "\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return dest


def fork_tree(root: Path = ROOT) -> Path:
    """The fork: the repository itself, whose `src/transformers` links into the work tree `.fork/`."""
    if not (root / "src" / "transformers" / "__init__.py").is_file():
        raise FileNotFoundError(f"{root / 'src' / 'transformers'} is missing: run `make fork` (or `make install`)")
    return root
