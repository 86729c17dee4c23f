"""Tests of the fork tooling itself (materialize, export, check, standalone, install), on scratch copies of
the repo."""

import importlib.metadata
import os
import re
import shutil
import tarfile
from pathlib import Path

import pytest
from forktool.bisect import bisect
from forktool.check import check
from forktool.common import (
    ForkError,
    Upstream,
    fetch_sdist,
    git,
    pip_error_summary,
    read_series,
    read_upstream,
    sha256_of,
)
from forktool.export import export
from forktool.materialize import materialize
from forktool.standalone import read_mail, standalone


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
    assert log == [f"upstream transformers {read_upstream(fork_root).version}"]
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
    assert git(work, "log", "--format=%s").stdout.splitlines() == [
        f"upstream transformers {read_upstream(fork_root).version}"
    ]
    # and the patch coming back is applied again
    shutil.copytree(mails, fork_root / "patches", dirs_exist_ok=True)
    materialize(fork_root)
    assert git(work, "log", "--format=%s").stdout.splitlines() == [
        "Mark DynamicLayer",
        f"upstream transformers {read_upstream(fork_root).version}",
    ]


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
    git(checkout, "commit", "--quiet", "--message", f"v{read_upstream(fork_root).version}")
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


# ---- standalone: each patch applies alone, or on the patches its `Depends-on:` trailers name ----

VALUES = "src/transformers/values.py"


@pytest.fixture
def toy_root(tmp_path, monkeypatch) -> Path:
    """A scratch repo pinned to a small synthetic release, toy 1.0: `values.py` holds `v0 = 0` to `v29 = 29`."""
    release = tmp_path / "release"
    (release / "src" / "transformers").mkdir(parents=True)
    (release / "src" / "transformers" / "__init__.py").write_text("", encoding="utf-8")
    (release / VALUES).write_text("".join(f"v{i} = {i}\n" for i in range(30)), encoding="utf-8")
    shutil.copy(REPO / "pyproject.toml", release / "pyproject.toml")
    sdist = tmp_path / "cache" / "sdist" / "toy-1.0.tar.gz"
    sdist.parent.mkdir(parents=True)
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(release, arcname="toy-1.0")
    monkeypatch.setenv("TRANSFORMERS_FORK_CACHE", str(sdist.parents[1]))
    root = tmp_path / "repo"
    (root / "patches").mkdir(parents=True)
    upstream = f"name = toy\nversion = 1.0\nsha256 = {sha256_of(sdist)}\n"
    (root / "patches" / "UPSTREAM").write_text(upstream, encoding="utf-8")
    (root / "patches" / "series").write_text("", encoding="utf-8")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def toy_series(root: Path, *commits: tuple[str, dict[str, tuple[str, str]], list[str]]) -> None:
    """Commit each `(subject, {path: (old, new)}, depends_on)` in turn on the toy release; export them as the series.

    `old` is replaced by `new` in `path` (a new file when `old` is empty); `depends_on` are `Depends-on:` subjects.
    """
    work = materialize(root)
    for subject, edits, depends_on in commits:
        for path, (old, new) in edits.items():
            file = work / path
            text = file.read_text(encoding="utf-8") if old else ""
            assert old in text, f"{old!r} not in {path}"
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(text.replace(old, new, 1) if old else new, encoding="utf-8")
        trailers = "".join(f"Depends-on: {d}\n" for d in depends_on)
        message = f"{subject}\n\nWhy and how, as upstream's PR template asks.\n" + (
            f"\n{trailers}" if trailers else ""
        )
        git(work, "add", "--all")
        git(work, "commit", "--quiet", "--message", message)
    export(root)


def set_value(name: str, old: int, new: int) -> dict[str, tuple[str, str]]:
    return {VALUES: (f"{name} = {old}\n", f"{name} = {new}\n")}


def run_standalone(root: Path, capsys, pytest_args: list[str] | None = None) -> tuple[bool, list[str]]:
    ok = standalone(root, pytest_args)
    return ok, [line for line in capsys.readouterr().out.splitlines() if line.startswith("00")]


def test_standalone_patches_that_apply_alone(toy_root, capsys):
    # the second patch is made on top of the first, but away from its lines
    toy_series(toy_root, ("Set v1", set_value("v1", 1, 100), []), ("Set v20", set_value("v20", 20, 200), []))
    assert run_standalone(toy_root, capsys) == (
        True,
        ["0001-Set-v1.patch: applies alone", "0002-Set-v20.patch: applies alone"],
    )


def test_standalone_declared_and_undeclared_dependency(toy_root, capsys):
    toy_series(
        toy_root,
        ("Set v1", set_value("v1", 1, 100), []),
        ("Raise v1", set_value("v1", 100, 1000), ["Set v1"]),
        ("Lower v1", set_value("v1", 1000, 10), []),  # needs both, declares neither
    )
    ok, lines = run_standalone(toy_root, capsys)
    assert not ok
    assert lines[:2] == ["0001-Set-v1.patch: applies alone", "0002-Raise-v1.patch: applies on 0001"]
    assert lines[2] == (
        "0003-Lower-v1.patch: FAILS: does not apply (made on another version) to src/transformers/values.py"
    )


def test_standalone_objects_of_a_patch_checked_before_do_not_help_a_later_one(toy_root, capsys):
    """v13's hunk has v10's line in its context: only a 3-way merge from the blob that patch 1 writes could take it."""
    toy_series(
        toy_root,
        ("Set v10", set_value("v10", 10, 100), []),
        ("Set v13", set_value("v13", 13, 130), []),
        ("Set v13 again", {VALUES: ("v13 = 130\n", "v13 = 131\n")}, ["Set v13"]),
    )
    ok, lines = run_standalone(toy_root, capsys)
    assert not ok
    assert lines == [
        "0001-Set-v10.patch: applies alone",
        "0002-Set-v13.patch: FAILS: does not apply (made on another version) to src/transformers/values.py",
        "0003-Set-v13-again.patch: FAILS: dependency 0002-Set-v13.patch fails: does not apply (made on another "
        "version) to src/transformers/values.py",
    ]


def test_standalone_depends_on_must_name_an_earlier_patch(toy_root, capsys):
    toy_series(
        toy_root,
        ("Set v1", set_value("v1", 1, 100), ["No such patch"]),
        ("Set v10", set_value("v10", 10, 100), ["Set v20"]),
        ("Set v20", set_value("v20", 20, 200), ["Set v20"]),
    )
    ok, lines = run_standalone(toy_root, capsys)
    assert not ok
    assert lines == [
        "0001-Set-v1.patch: FAILS: Depends-on names no patch of the series: 'No such patch'",
        "0002-Set-v10.patch: FAILS: Depends-on names a later patch, 0003-Set-v20.patch (it must come first)",
        "0003-Set-v20.patch: FAILS: Depends-on names the patch itself (a cycle)",
    ]


def test_standalone_transitive_dependencies_apply_in_series_order(toy_root, capsys):
    toy_series(
        toy_root,
        ("Set v1", set_value("v1", 1, 100), []),
        ("Raise v1", set_value("v1", 100, 1000), ["Set v1"]),
        ("Set v20", set_value("v20", 20, 200), []),
        ("Raise v1 again", set_value("v1", 1000, 10000), ["Raise v1"]),
        # declared out of order, and again what the dependency already needs
        ("Lower v1", set_value("v1", 10000, 5), ["Raise v1 again", "Set v1"]),
    )
    ok, lines = run_standalone(toy_root, capsys)
    assert ok, lines
    assert lines[3:] == [
        "0004-Raise-v1-again.patch: applies on 0001, 0002",
        "0005-Lower-v1.patch: applies on 0001, 0002, 0004",
    ]


def test_standalone_mail_subject_and_trailers(toy_root):
    long_subject = "Set v1 " + "to a value that a long subject line describes at length " * 2
    toy_series(toy_root, (long_subject.strip(), set_value("v1", 1, 100), ["Set   v0", "Set v2"]))
    patch = read_series(toy_root)[0]
    assert "\n " in patch.read_text(encoding="utf-8").split("\n\n", 1)[0]  # the Subject header is folded
    # a `Depends-on:` after the `---` line is no trailer
    patch.write_text(patch.read_text(encoding="utf-8") + "Depends-on: not a trailer\n", encoding="utf-8")
    assert read_mail(patch) == (" ".join(long_subject.split()), ["Set v0", "Set v2"])


def test_standalone_tests_run_on_the_patch_tree(toy_root, capsys):
    def test_file(name: str, *checks: str) -> dict[str, tuple[str, str]]:
        body = "".join(f"    assert values.{check}\n" for check in checks)
        return {
            f"tests/utils/test_{name}.py": ("", f"from transformers import values\n\n\ndef test_{name}():\n{body}")
        }

    toy_series(
        toy_root,
        ("Set v1", {**set_value("v1", 1, 100), **test_file("v1", "v1 == 100")}, []),
        ("Set v20", set_value("v20", 20, 200), []),
        # its test needs patch 1 as well, which it does not declare
        ("Set v25", {**set_value("v25", 25, 250), **test_file("v25", "v25 == 250", "v1 == 100")}, []),
        ("Set v10", {**set_value("v10", 10, 100), **test_file("v10", "v10 == 100", "v1 == 100")}, ["Set v1"]),
    )
    ok, lines = run_standalone(toy_root, capsys, pytest_args=[])
    assert not ok
    assert re.fullmatch(r"0001-Set-v1.patch: applies alone; 1 test files, 1 passed in .*", lines[0]), lines
    assert lines[1] == "0002-Set-v20.patch: applies alone; no tests"
    assert re.fullmatch(r"0003-Set-v25.patch: FAILS: its tests fail; 1 test files, 1 failed in .*", lines[2]), lines
    assert re.fullmatch(r"0004-Set-v10.patch: applies on 0001; 1 test files, 1 passed in .*", lines[3]), lines


def test_standalone_before_runs_the_tests_without_the_source_change(toy_root, tmp_path, capsys):
    toy_series(
        toy_root,
        ("Set v1", set_value("v1", 1, 100), []),
        (
            "Raise v1",
            {
                **set_value("v1", 100, 1000),
                "tests/utils/test_v1.py": (
                    "",
                    "from transformers import values\n\n\n"
                    "def test_v1_is_raised_from_one_hundred_to_one_thousand_by_the_patch():\n"
                    "    assert values.v1 == 1000\n",
                ),
            },
            ["Set v1"],
        ),
        # its test imports a name the patch adds: without it, pytest cannot collect the file
        (
            "Add v30",
            {
                VALUES: ("v29 = 29\n", "v29 = 29\nv30 = 30\n"),
                "tests/utils/test_v30.py": (
                    "",
                    "from transformers.values import v30\n\n\ndef test_v30():\n    assert v30 == 30\n",
                ),
            },
            [],
        ),
    )
    report = tmp_path / "report"
    ok = standalone(toy_root, [], before=True, report=report)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("00")]
    assert ok, lines  # failing tests without the source change are expected
    assert lines[0] == "0001-Set-v1.patch: applies alone; no tests"
    assert re.fullmatch(
        r"0002-Raise-v1.patch: applies on 0001; 1 test files, 1 passed in .* \| without its source change: "
        r"1 failed in .*",
        lines[1],
    ), lines
    assert re.fullmatch(
        r"0003-Add-v30.patch: applies alone; 1 test files, 1 passed in .* \| without its source change: "
        r"errors during collection: 1 \(1 error in .*\)",
        lines[2],
    ), lines
    assert sorted(p.name for p in report.iterdir()) == ["0002-Raise-v1.txt", "0003-Add-v30.txt"]
    assert (report / "0002-Raise-v1.txt").read_text(encoding="utf-8").splitlines()[1:] == [
        # the error as well, after an id longer than pytest's default 80 columns
        "FAILED tests/utils/test_v1.py::test_v1_is_raised_from_one_hundred_to_one_thousand_by_the_patch - "
        "assert 100 == 1000"
    ]
    assert (report / "0003-Add-v30.txt").read_text(encoding="utf-8").splitlines()[1:] == [
        "ERROR collecting tests/utils/test_v30.py - ImportError: cannot import name 'v30' from 'transformers.values' "
        "(src/transformers/values.py)"
    ]


def test_check_reports_a_patch_that_does_not_apply_alone(toy_root):
    toy_series(
        toy_root,
        ("Set v1", set_value("v1", 1, 100), []),
        ("Raise v1", set_value("v1", 100, 1000), []),
    )
    assert check(toy_root) == [
        "0002-Raise-v1.patch does not apply with `git am -3` to pristine alone or on its Depends-on patches: "
        "does not apply (made on another version) to src/transformers/values.py"
    ]


# ---- bisect: after patches 1..k, the tests of patches 1..k pass ----


def test_bisect_from_a_later_prefix(toy_root, capsys):
    test_file = {
        "tests/utils/test_v1.py": (
            "",
            "from transformers import values\n\n\ndef test_v1():\n    assert values.v1 == 100\n",
        )
    }
    toy_series(
        toy_root,
        ("Set v1", {**set_value("v1", 1, 100), **test_file}, []),
        ("Set v20", set_value("v20", 20, 200), []),
        ("Set v1 back", set_value("v1", 100, 1), []),
    )
    assert not bisect(toy_root, [])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("after ")]
    assert [line.split(":")[0] for line in lines] == [f"after {p.name}" for p in read_series(toy_root)], lines
    assert "1 passed" in lines[0] and "1 passed" in lines[1] and "1 failed" in lines[2], lines

    assert not bisect(toy_root, [], first=3)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("after ")]
    assert len(lines) == 1 and lines[0].startswith("after 0003-Set-v1-back.patch: 1 test files, 1 failed"), lines
    assert bisect(toy_root, [], first=2) is False
    with pytest.raises(ForkError, match="the series has patches 1 to 3"):
        bisect(toy_root, [], first=4)
