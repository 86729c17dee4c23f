"""Shared pieces of the fork tooling: the pinned upstream, the sdist cache, the patch series and a quiet git.

Standard library only: `setup.py` imports this inside pip's isolated build environment.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]

# Identity and date of the commits the tooling makes in the work tree. Fixed, so that the same sdist and the
# same patches give the same commit hashes on every machine.
TOOL_NAME = "transformers-fork"
TOOL_EMAIL = "transformers-fork@localhost"
TOOL_DATE = "2000-01-01T00:00:00+0000"
UPSTREAM_TAG = "upstream"
WORK_BRANCH = "fork"

# Build and test droppings that must not count as edits in the work tree.
WORK_TREE_EXCLUDES = [
    "__pycache__/",
    "*.py[cod]",
    ".pytest_cache/",
    ".hypothesis/",
    "/build/",
]


class ForkError(Exception):
    """An error the tooling reports to the user as one message, without a traceback."""


@dataclass(frozen=True)
class Upstream:
    name: str
    version: str
    sha256: str | None

    @property
    def sdist_name(self) -> str:
        return f"{self.name}-{self.version}.tar.gz"


def read_upstream(root: Path = ROOT) -> Upstream:
    """Parse `patches/UPSTREAM` (`key = value` lines, `#` comments)."""
    path = root / "patches" / "UPSTREAM"
    fields = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ForkError(f"{path}: cannot parse line {line!r}, expected `key = value`")
        fields[key.strip()] = value.strip()
    missing = {"name", "version", "sha256"} - fields.keys()
    if missing:
        raise ForkError(f"{path}: missing {', '.join(sorted(missing))}")
    return Upstream(fields["name"], fields["version"], fields["sha256"].lower())


def read_series(root: Path = ROOT) -> list[Path]:
    """The patches in application order, as listed in `patches/series`."""
    series = root / "patches" / "series"
    if not series.exists():
        return []
    patches = []
    for line in series.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            path = root / "patches" / line
            if not path.is_file():
                raise ForkError(f"patches/series names {line}, which does not exist")
            patches.append(path)
    return patches


def cache_dir() -> Path:
    """Where verified sdists are kept: outside the repository, shared by every clone of it."""
    if os.environ.get("TRANSFORMERS_FORK_CACHE"):
        return Path(os.environ["TRANSFORMERS_FORK_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "transformers-fork"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(upstream: Upstream, cache: Path | None = None) -> Path:
    """Return the path of the verified sdist of `upstream`, downloading it with pip when it is not cached.

    A file whose sha256 differs from the pinned one is refused, whether it comes from the cache or from the
    download; nothing unverified is ever extracted.
    """
    cache = cache or cache_dir()
    target = cache / "sdist" / upstream.sdist_name
    if target.exists():
        _verify(target, upstream)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
            "--dest", tmp, f"{upstream.name}=={upstream.version}",
        ]  # fmt: skip
        log(f"fetching {upstream.name} {upstream.version} (sdist) with pip")
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise ForkError(
                f"`pip download` of {upstream.name}=={upstream.version} failed: {pip_error_summary(result.stderr)}"
            )
        downloaded = Path(tmp) / upstream.sdist_name
        if not downloaded.exists():
            found = ", ".join(p.name for p in Path(tmp).iterdir()) or "nothing"
            raise ForkError(f"`pip download` gave {found}, expected {upstream.sdist_name}")
        _verify(downloaded, upstream)
        os.replace(downloaded, target)
    return target


def pip_error_summary(stderr: str, limit: int = 300) -> str:
    """pip's error as one short line: its `ERROR:` line, with the list of available versions cut to its last ones."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    error = next((line for line in lines if line.startswith("ERROR:")), lines[-1] if lines else "no output")
    error = error.removeprefix("ERROR:").strip()
    match = re.search(r"\(from versions: ([^)]*)\)", error)
    if match:
        versions = [v.strip() for v in match.group(1).split(",") if v.strip()]
        shown = f"{len(versions)} versions, the latest {', '.join(versions[-3:])}" if versions else "no versions"
        error = error[: match.start()] + f"({shown})" + error[match.end() :]
    return error if len(error) <= limit else error[: limit - 3] + "..."


def _verify(path: Path, upstream: Upstream) -> None:
    actual = sha256_of(path)
    if upstream.sha256 is None:
        log(f"{path.name}: sha256 {actual} (not pinned, not verified)")
        return
    if actual != upstream.sha256:
        raise ForkError(
            f"refusing {path}: its sha256 is {actual}, patches/UPSTREAM pins {upstream.sha256}. "
            "Delete the file to download it again."
        )


def extract_sdist(sdist: Path, dest: Path) -> None:
    """Extract the sdist's top folder (`name-version/`) as the contents of `dest`."""
    with tarfile.open(sdist) as tar:
        members = tar.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members}
        if len(tops) != 1:
            raise ForkError(f"{sdist.name}: expected one top-level folder, found {sorted(tops)}")
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:  # Python < 3.11.4
                tar.extractall(tmp)
            top = Path(tmp) / tops.pop()
            for child in top.iterdir():
                shutil.move(str(child), dest / child.name)


def git_env() -> dict[str, str]:
    """An environment in which git ignores the user's and the system's configuration and commits as the tool."""
    env = dict(os.environ)
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME=TOOL_NAME,
        GIT_AUTHOR_EMAIL=TOOL_EMAIL,
        GIT_AUTHOR_DATE=TOOL_DATE,
        GIT_COMMITTER_NAME=TOOL_NAME,
        GIT_COMMITTER_EMAIL=TOOL_EMAIL,
        GIT_COMMITTER_DATE=TOOL_DATE,
        LC_ALL="C",
    )
    return env


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=git_env())
    if check and result.returncode != 0:
        raise ForkError(f"git {' '.join(args)} failed in {repo}:\n{(result.stderr or result.stdout).strip()}")
    return result


def log(message: str) -> None:
    print(f"[fork] {message}", file=sys.stderr, flush=True)


def main_wrapper(main) -> None:
    """Run a verb's `main`, turning `ForkError` into one line on stderr and exit status 1."""
    try:
        sys.exit(main())
    except ForkError as e:
        print(f"[fork] error: {e}", file=sys.stderr)
        sys.exit(1)
