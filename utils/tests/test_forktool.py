"""Tests of the fork tooling itself (materialize, export, check, rebase, install), on scratch copies of the repo."""

import importlib.metadata
import os
import re
import shutil
from pathlib import Path

import pytest
from forktool.check import check
from forktool.common import ForkError, Upstream, fetch_sdist, git, pip_error_summary, read_series, read_upstream
from forktool.export import export
from forktool.materialize import materialize
from forktool.rebase import rebase


REPO = Path(__file__).resolve().parents[2]
CACHE_FILE = "src/transformers/cache_utils.py"


def commit_edit(work: Path, path: str, old: str, new: str, subject: str) -> None:
    """Replace `old` by `new` in `path` of the work tree and commit it as one patch."""
    file = work / path
    text = file.read_text(encoding="utf-8")
    assert old in text, f"{old!r} not in {path}"
    file.write_text(text.replace(old, new, 1), encoding="utf-8")
    git(
        work, "commit", "--quiet", "--all", "--message", f"{subject}\n\nWhy and how, as upstream's PR template asks.\n"
    )


def snapshot(tree: Path) -> dict[str, tuple[int, int]]:
    """`path -> (size, mtime_ns)` of every file and link under `tree`, `.git` included."""
    return {
        str(p.relative_to(tree)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in tree.rglob("*")
        if not p.is_dir() or p.is_symlink()
    }


def make_one_patch(root: Path) -> Path:
    """Materialize `root`, commit one edit in its work tree, export it; return the work tree."""
    work = materialize(root)
    commit_edit(
        work,
        CACHE_FILE,
        "class DynamicLayer(CacheLayerMixin):",
        "class DynamicLayer(CacheLayerMixin):  # fork",
        "Mark DynamicLayer",
    )
    export(root)
    return work


def test_materialize_builds_pristine_commit_and_links(fork_root):
    work = materialize(fork_root)
    log = git(work, "log", "--format=%s").stdout.splitlines()
    assert log == ["upstream transformers 5.23.0"]
    assert git(work, "status", "--porcelain").stdout == ""
    assert os.readlink(fork_root / "src" / "transformers") == "../.fork/src/transformers"
    assert os.readlink(fork_root / "tests") == ".fork/tests"
    assert (fork_root / "src" / "transformers" / "cache_utils.py").is_file()


def test_materialize_twice_changes_nothing(fork_root):
    make_one_patch(fork_root)
    shutil.rmtree(fork_root / ".fork")
    materialize(fork_root)
    before = snapshot(fork_root)
    materialize(fork_root)
    assert snapshot(fork_root) == before


def test_materialize_is_reproducible(fork_root, tmp_path):
    """Two builds from the same inputs give the same commits, hashes included."""
    work = make_one_patch(fork_root)
    other = tmp_path / "other"
    shutil.copytree(fork_root / "patches", other / "patches")
    shutil.rmtree(work)
    heads = [git(materialize(root), "rev-parse", "HEAD").stdout for root in (fork_root, other)]
    assert heads[0] == heads[1]


def test_materialize_rebuilds_when_patches_change(fork_root, tmp_path):
    work = make_one_patch(fork_root)
    mails = tmp_path / "mails"
    shutil.copytree(fork_root / "patches", mails)
    # back to an empty series, as if `git pull` removed the patch: the work tree is rebuilt without it
    for patch in read_series(fork_root):
        patch.unlink()
    (fork_root / "patches" / "series").write_text("", encoding="utf-8")
    materialize(fork_root)
    assert git(work, "log", "--format=%s").stdout.splitlines() == ["upstream transformers 5.23.0"]
    # and the patch coming back is applied again
    shutil.copytree(mails, fork_root / "patches", dirs_exist_ok=True)
    materialize(fork_root)
    assert git(work, "log", "--format=%s").stdout.splitlines() == ["Mark DynamicLayer", "upstream transformers 5.23.0"]


def test_materialize_keeps_unexported_work(fork_root):
    work = make_one_patch(fork_root)
    commit_edit(work, CACHE_FILE, "class StaticLayer(", "class StaticLayer(  ", "Unexported")
    # a pull that removes the exported patch: the work tree would be rebuilt, losing the unexported commit
    read_series(fork_root)[0].unlink()
    (fork_root / "patches" / "series").write_text("", encoding="utf-8")
    with pytest.raises(ForkError, match="no patch holds yet"):
        materialize(fork_root)
    assert git(work, "log", "-1", "--format=%s").stdout.strip() == "Unexported"


def test_patches_regenerate_byte_identical(fork_root):
    make_one_patch(fork_root)
    patches = read_series(fork_root)
    assert [p.name for p in patches] == ["0001-Mark-DynamicLayer.patch"]
    before = {p.name: p.read_bytes() for p in (fork_root / "patches").iterdir()}
    text = before["0001-Mark-DynamicLayer.patch"].decode()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [PATCH] Mark DynamicLayer" in text
    assert not text.rstrip().endswith(("--", "2.39.5"))  # no version signature

    assert export(fork_root) == []
    # rebuilt from scratch, the same patches come out
    shutil.rmtree(fork_root / ".fork")
    materialize(fork_root)
    assert export(fork_root) == []
    assert {p.name: p.read_bytes() for p in (fork_root / "patches").iterdir()} == before


def test_patches_apply_with_plain_git_am(fork_root, sdist, tmp_path):
    """What a user does upstream: `git am patches/*.patch` in a checkout of the release."""
    make_one_patch(fork_root)
    checkout = tmp_path / "upstream"
    checkout.mkdir()
    shutil.unpack_archive(sdist, tmp_path / "unpacked")
    shutil.copytree(next((tmp_path / "unpacked").iterdir()), checkout, dirs_exist_ok=True)
    git(checkout, "init", "--quiet")
    git(checkout, "add", "--all")
    git(checkout, "commit", "--quiet", "--message", "v5.23.0")
    git(checkout, "am", *[str(p) for p in sorted((fork_root / "patches").glob("*.patch"))])
    assert "class DynamicLayer(CacheLayerMixin):  # fork" in (checkout / CACHE_FILE).read_text(encoding="utf-8")


def test_check_passes_on_agreeing_tree(fork_root):
    make_one_patch(fork_root)
    assert check(fork_root) == []


def test_check_catches_hand_edit(fork_root):
    work = make_one_patch(fork_root)
    target = work / "src" / "transformers" / "activations.py"
    target.write_text(target.read_text(encoding="utf-8") + "\n# hand edit\n", encoding="utf-8")
    problems = check(fork_root)
    assert any("edits that no patch holds" in p and "activations.py" in p for p in problems), problems

    git(work, "commit", "--quiet", "--all", "--message", "Hand edit")
    problems = check(fork_root)
    assert any("not pristine + patches" in p and "src/transformers/activations.py" in p for p in problems), problems


def test_check_catches_unexported_commit_message(fork_root):
    work = make_one_patch(fork_root)
    git(work, "commit", "--quiet", "--amend", "--message", "Reworded\n\nBody.\n")
    problems = check(fork_root)
    assert any("differ from patches/" in p for p in problems), problems


def test_check_catches_patch_that_does_not_apply(fork_root):
    make_one_patch(fork_root)
    patch = read_series(fork_root)[0]
    patch.write_text(
        patch.read_text(encoding="utf-8").replace("class DynamicLayer(", "class NoSuchLayer("), encoding="utf-8"
    )
    problems = check(fork_root)
    assert len(problems) == 1 and "0001-Mark-DynamicLayer.patch does not apply" in problems[0], problems


def test_check_runs_ruff_on_touched_files(fork_root):
    work = materialize(fork_root)
    commit_edit(work, CACHE_FILE, "import torch\n", "import os\n\nimport torch\n", "Unused import")
    export(fork_root)
    problems = check(fork_root)
    assert any("ruff check" in p and "F401" in p for p in problems), problems


def test_check_catches_stray_patch(fork_root):
    make_one_patch(fork_root)
    (fork_root / "patches" / "0002-stray.patch").write_text("", encoding="utf-8")
    assert any("0002-stray.patch is not listed" in p for p in check(fork_root))


def test_corrupted_sdist_is_refused(fork_root, sdist, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "sdist").mkdir(parents=True)
    corrupted = bytearray(sdist.read_bytes())
    corrupted[len(corrupted) // 2] ^= 0xFF
    (cache / "sdist" / sdist.name).write_bytes(corrupted)
    monkeypatch.setenv("TRANSFORMERS_FORK_CACHE", str(cache))
    with pytest.raises(ForkError, match="refusing .*sha256"):
        materialize(fork_root)
    assert not (fork_root / ".fork").exists()
    assert not (fork_root / ".fork.new").exists()


def test_wrong_pin_is_refused(sdist):
    pinned = read_upstream(REPO)
    wrong = Upstream(pinned.name, pinned.version, "0" * 64)
    with pytest.raises(ForkError, match="refusing"):
        fetch_sdist(wrong, cache=sdist.parents[1])


def test_rebase_reports_per_patch(fork_root, capsys):
    work = make_one_patch(fork_root)
    commit_edit(work, CACHE_FILE, "class StaticLayer(", "class StaticLayer(  ", "Second change")
    export(fork_root)
    first = read_series(fork_root)[0]
    # make the first patch's context stale, as a new release would
    first.write_text(
        first.read_text(encoding="utf-8").replace("class DynamicLayer(", "class OtherLayer("), encoding="utf-8"
    )
    assert rebase(fork_root, read_upstream(fork_root).version) is False
    out = capsys.readouterr().out
    assert re.search(r"^  0001-Mark-DynamicLayer.patch +FAILED$", out, re.MULTILINE), out
    assert re.search(r"^  0002-Second-change.patch +applied$", out, re.MULTILINE), out
    assert "1/2 patches applied" in out


def test_installed_distribution_is_the_fork():
    """`import transformers` comes from the fork tree, and the distribution carries the local version."""
    import transformers

    version = importlib.metadata.version("transformers")
    upstream = read_upstream(REPO)
    assert version.startswith(f"{upstream.version}+fork.{len(read_series(REPO))}.g"), version
    assert Path(transformers.__file__).resolve() == (REPO / ".fork" / "src" / "transformers" / "__init__.py").resolve()


def test_copies_check_catches_a_copy_left_behind(tmp_path):
    from forktool.copies import check_copies

    models = tmp_path / "src" / "transformers" / "models"
    for name in ("a", "b"):
        (models / name).mkdir(parents=True)
    source = "class AMLP:\n    def forward(self, x):\n        # A\n        return x + 1\n"
    (models / "a" / "modeling_a.py").write_text(source, encoding="utf-8")
    copy = "# Copied from transformers.models.a.modeling_a.AMLP with A->B\n" + source.replace("A", "B") + "\n\nx = 1\n"
    (models / "b" / "modeling_b.py").write_text(copy, encoding="utf-8")
    touched = ["src/transformers/models/a/modeling_a.py"]
    assert check_copies(tmp_path, touched) == []
    (models / "a" / "modeling_a.py").write_text(source.replace("x + 1", "x + 2"), encoding="utf-8")
    assert check_copies(tmp_path, touched) == [
        "src/transformers/models/b/modeling_b.py:1: not in sync with transformers.models.a.modeling_a.AMLP with "
        "A->B (apply the same change to the copy)"
    ]
    # and from the copy's side, when only the copy is touched
    assert len(check_copies(tmp_path, ["src/transformers/models/b/modeling_b.py"])) == 1


def test_pip_error_is_one_short_line():
    versions = ", ".join(f"4.{minor}.0" for minor in range(300))
    stderr = (
        f"ERROR: Could not find a version that satisfies the requirement transformers==9.9.9 (from versions: {versions})\n"
        "ERROR: No matching distribution found for transformers==9.9.9\n"
    )
    summary = pip_error_summary(stderr)
    assert "\n" not in summary and len(summary) <= 300
    assert summary == (
        "Could not find a version that satisfies the requirement transformers==9.9.9 "
        "(300 versions, the latest 4.297.0, 4.298.0, 4.299.0)"
    )
