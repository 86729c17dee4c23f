"""Tests of `make rebase`, `make rebase-continue`, `make rebase-finish` and `make upstream-outlook` on two small
synthetic releases, toy 1.0 (the pinned one) and toy 1.1."""

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from forktool import outlook as outlook_module
from forktool.common import ForkError, git, read_series, read_upstream, sha256_of
from forktool.export import export
from forktool.materialize import materialize
from forktool.outlook import outlook
from forktool.rebase import continue_rebase, finish, read_releases, rebase


REPO = Path(__file__).resolve().parents[2]
VALUES = "src/transformers/values.py"
PRISTINE = "".join(f"v{i} = {i}\n" for i in range(30))
# toy 1.1: five lines inserted at the top (every hunk moves), v12, v20 and v28 changed
RELEASE_1_1 = "# toy 1.1\n" * 5 + PRISTINE.replace("v12 = 12\n", "v12 = 1200\n").replace(
    "v20 = 20\n", "v20 = 2000\n"
).replace("v28 = 28\n", "v28 = 280\n")


def make_sdist(tmp_path: Path, version: str, values: str) -> Path:
    release = tmp_path / "releases" / version
    (release / "src" / "transformers").mkdir(parents=True)
    (release / "src" / "transformers" / "__init__.py").write_text("", encoding="utf-8")
    (release / VALUES).write_text(values, encoding="utf-8")
    sdist = tmp_path / "cache" / "sdist" / f"toy-{version}.tar.gz"
    sdist.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(release, arcname=f"toy-{version}")
    return sdist


@pytest.fixture
def toy(tmp_path, monkeypatch) -> tuple[Path, str]:
    """A scratch repo pinned to toy 1.0, toy 1.1 in the sdist cache; returns the root and the sha256 of 1.1."""
    old = make_sdist(tmp_path, "1.0", PRISTINE)
    new = make_sdist(tmp_path, "1.1", RELEASE_1_1)
    monkeypatch.setenv("TRANSFORMERS_FORK_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "repo"
    (root / "patches").mkdir(parents=True)
    pin = f"# the base release\nname = toy\nversion = 1.0\nsha256 = {sha256_of(old)}\n"
    (root / "patches" / "UPSTREAM").write_text(pin, encoding="utf-8")
    (root / "patches" / "series").write_text("", encoding="utf-8")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    monkeypatch.chdir(root)
    return root, sha256_of(new)


def series(root: Path, *changes: tuple[str, str, str]) -> None:
    """Commit each `(subject, old line, new line)` of `values.py` in turn on the pinned release; export them."""
    work = materialize(root)
    for subject, old, new in changes:
        file = work / VALUES
        file.write_text(file.read_text(encoding="utf-8").replace(f"{old}\n", f"{new}\n", 1), encoding="utf-8")
        git(work, "commit", "--quiet", "--all", "--message", f"{subject}\n\nWhy and how.\n")
    export(root)


def patch_lines(out: str) -> list[str]:
    """The report's per-patch lines, their padding collapsed."""
    return [" ".join(line.split()) for line in out.splitlines() if line.startswith("  00")]


def report(capsys) -> list[str]:
    return patch_lines(capsys.readouterr().out)


def snapshot(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in tree.rglob("*") if p.is_file() and ".git" not in p.parts}


def test_moved_and_changed_context_merge_and_finish_exports(toy, capsys):
    root, sha = toy
    # v5's context moved down by five lines; v10's context holds v12, which 1.1 changed: `git am` cannot take it
    series(root, ("Set v5", "v5 = 5", "v5 = 500"), ("Set v10", "v10 = 10", "v10 = 100"))
    assert rebase(root, "1.1", sha) is True
    assert report(capsys) == ["0001-Set-v5.patch applied", "0002-Set-v10.patch merged"]

    assert finish(root, "1.1") == ["0001-Set-v5.patch", "0002-Set-v10.patch", "UPSTREAM"]
    pinned = read_upstream(root)
    assert (pinned.version, pinned.sha256) == ("1.1", sha)
    assert (root / "patches" / "UPSTREAM").read_text(encoding="utf-8").startswith("# the base release\n")
    assert [p.name for p in read_series(root)] == ["0001-Set-v5.patch", "0002-Set-v10.patch"]
    # `.fork` held nothing unexported: `make fork` rebuilds it on 1.1 with plain `git am`
    work = materialize(root)
    assert git(work, "log", "--format=%s").stdout.splitlines() == ["Set v10", "Set v5", "upstream toy 1.1"]
    values = (work / VALUES).read_text(encoding="utf-8")
    assert "v5 = 500\n" in values and "v10 = 100\n" in values and "v12 = 1200\n" in values


def test_conflict_stops_then_continue_and_finish(toy, capsys):
    root, sha = toy
    series(
        root,
        ("Set v5", "v5 = 5", "v5 = 500"),
        ("Set v20", "v20 = 20", "v20 = 200"),  # 1.1 changed the same line
        ("Set v24", "v24 = 24", "v24 = 240"),
        ("Set v28", "v28 = 28", "v28 = 280"),  # 1.1 made the same change
    )
    before = snapshot(root / "patches")
    assert rebase(root, "1.1", sha) is False
    out = capsys.readouterr().out
    assert patch_lines(out) == [
        "0001-Set-v5.patch applied",
        f"0002-Set-v20.patch conflict: {VALUES}",
        "0003-Set-v24.patch pending; would apply",  # a forecast, from picking it now
        "0004-Set-v28.patch pending; would be empty",
    ]
    assert "1 applied, 1 conflict, 2 pending (would: 1 apply, 1 be empty)" in out
    assert "make rebase-continue UPSTREAM=1.1" in out and f"git -C .fork-rebase/1.1 add {VALUES}" in out
    work = root / ".fork-rebase" / "1.1"
    conflicted = (work / VALUES).read_text(encoding="utf-8")
    assert re.search(r"<<<<<<< .*\nv20 = 2000\n\|\|\|\|\|\|\| .*\nv20 = 20\n=======\nv20 = 200\n>>>>>>> ", conflicted)
    with pytest.raises(ForkError, match="not through yet"):
        finish(root, "1.1")
    assert snapshot(root / "patches") == before

    # continuing before the conflict is resolved reports it again
    assert continue_rebase(root, "1.1") is False
    assert report(capsys)[1] == f"0002-Set-v20.patch conflict: {VALUES}"
    # staged with its markers, it is refused
    git(work, "add", VALUES)
    with pytest.raises(ForkError, match="conflict markers"):
        continue_rebase(root, "1.1")

    resolved = re.sub(r"<<<<<<< [^\n]*\n.*>>>>>>> [^\n]*\n", "v20 = 2200\n", conflicted, flags=re.DOTALL)
    (work / VALUES).write_text(resolved, encoding="utf-8")
    git(work, "add", VALUES)
    assert continue_rebase(root, "1.1") is True
    assert report(capsys) == [
        "0001-Set-v5.patch applied",
        f"0002-Set-v20.patch resolved (conflict in {VALUES})",
        "0003-Set-v24.patch applied",
        "0004-Set-v28.patch dropped (empty on 1.1: upstream carries it)",
    ]

    # every mail changes (its line numbers and blob ids are those of 1.1), and 0004 is gone
    assert finish(root, "1.1") == [
        "0004-Set-v28.patch",
        "0001-Set-v5.patch",
        "0002-Set-v20.patch",
        "0003-Set-v24.patch",
        "series",
        "UPSTREAM",
    ]
    assert (root / "patches" / "series").read_text(encoding="utf-8").split() == [
        "0001-Set-v5.patch",
        "0002-Set-v20.patch",
        "0003-Set-v24.patch",
    ]
    assert "+v20 = 2200" in (root / "patches" / "0002-Set-v20.patch").read_text(encoding="utf-8")
    assert (read_upstream(root).version, read_upstream(root).sha256) == ("1.1", sha)


def test_rebase_refuses_what_would_lose_work(toy, capsys):
    root, sha = toy
    series(root, ("Set v20", "v20 = 20", "v20 = 200"))
    with pytest.raises(ForkError, match="refusing .*sha256"):
        rebase(root, "1.1", "0" * 64)
    assert rebase(root, "1.1", sha) is False
    # a second `make rebase` would drop the conflict being resolved
    with pytest.raises(ForkError, match="rebase-continue"):
        rebase(root, "1.1", sha)
    work = root / ".fork-rebase" / "1.1"
    git(work, "rebase", "--skip")
    assert continue_rebase(root, "1.1") is True
    assert report(capsys)[-1] == f"0001-Set-v20.patch dropped (skipped at its conflict in {VALUES})"
    # an unexported commit in .fork would be left on 1.0
    fork = root / ".fork"
    (fork / VALUES).write_text("v0 = -1\n", encoding="utf-8")
    git(fork, "commit", "--quiet", "--all", "--message", "Unexported")
    with pytest.raises(ForkError, match="holds commits or edits"):
        finish(root, "1.1")
    assert read_upstream(root).version == "1.0"
    # starting again drops the old work tree; after `git rebase --abort` there is nothing to go on with
    assert rebase(root, "1.1", sha, force=True) is False
    git(work, "rebase", "--abort")
    with pytest.raises(ForkError, match="was aborted"):
        continue_rebase(root, "1.1")


def test_outlook_reports_and_changes_nothing(toy, capsys, monkeypatch):
    root, _ = toy
    series(
        root,
        ("Set v5", "v5 = 5", "v5 = 500"),
        ("Set v20", "v20 = 20", "v20 = 200"),
        ("Set v10", "v10 = 10", "v10 = 100"),
        ("Raise v20", "v20 = 200", "v20 = 201"),  # made on the conflicting patch, tried without it: a conflict too
        ("Set v12", "v12 = 12", "v12 = 120"),  # a conflict with upstream alone, in the file 0002 changes too
        ("Set v28", "v28 = 28", "v28 = 280"),
    )
    before = snapshot(root)
    monkeypatch.setattr(outlook_module, "newest_version", lambda name: "1.1")
    assert [" ".join(line.split()) for line in outlook(root)] == [
        "0001-Set-v5.patch applies",
        f"0002-Set-v20.patch conflicts: {VALUES}",
        "0003-Set-v10.patch merges",
        f"0004-Raise-v20.patch conflicts: {VALUES} (needs 0002, left out)",
        f"0005-Set-v12.patch conflicts: {VALUES}",
        "0006-Set-v28.patch empty on 1.1 (upstream carries it)",
    ]
    assert "1 apply, 1 merge, 3 conflict, 1 empty" in capsys.readouterr().out
    assert snapshot(root) == before
    assert not (root / ".fork-rebase").exists()


def test_finish_records_the_commit_of_the_release_it_leaves(toy, capsys):
    """In a git repository, `finish` appends the old release and main's commit, which carries its series, to
    `patches/RELEASES`; it refuses while `patches/` holds changes that are not committed."""
    root, sha = toy
    series(root, ("Set v5", "v5 = 5", "v5 = 500"))
    git(root, "init", "--quiet")
    (root / ".gitignore").write_text("/.fork/\n/.fork-rebase/\n/src/\n/tests\n", encoding="utf-8")
    git(root, "add", "--all")
    git(root, "commit", "--quiet", "--message", "series on toy 1.0")
    commit = git(root, "rev-parse", "HEAD").stdout.strip()
    assert rebase(root, "1.1", sha) is True
    capsys.readouterr()

    (root / "patches" / "series").write_text("0001-Set-v5.patch\n\n", encoding="utf-8")
    with pytest.raises(ForkError, match="patches/ holds changes that are not committed"):
        finish(root, "1.1")
    git(root, "checkout", "--quiet", "--", "patches")

    assert finish(root, "1.1") == ["0001-Set-v5.patch", "RELEASES", "UPSTREAM"]
    assert read_releases(root) == {"1.0": commit}
    assert (root / "patches" / "RELEASES").read_text(encoding="utf-8").startswith("# The release series")


def test_releases_of_this_repository_are_commits_of_main_that_pin_them():
    """Every release in `patches/RELEASES` names a commit in main's history whose `patches/UPSTREAM` pins it."""
    releases = read_releases(REPO)
    assert "5.23.0" in releases
    for version, commit in releases.items():
        assert git(REPO, "merge-base", "--is-ancestor", commit, "HEAD", check=False).returncode == 0, commit
        pin = git(REPO, "show", f"{commit}:patches/UPSTREAM").stdout
        assert re.search(rf"^version = {re.escape(version)}$", pin, flags=re.MULTILINE), (version, commit)


def test_earlier_release_installs_from_its_commit(tmp_path):
    """The README's line: `pip install "git+<fork-url>@<commit>"` with the commit of 5.23.0 installs that series."""
    commit = read_releases(REPO)["5.23.0"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", "--no-deps", f"git+file://{REPO}@{commit}"]
    result = subprocess.run(install, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    show = subprocess.run([str(python), "-m", "pip", "show", "transformers"], capture_output=True, text=True)
    assert re.search(r"^Version: 5\.23\.0\+fork\.13\.g[0-9a-f]{8}$", show.stdout, flags=re.MULTILINE), show.stdout
