"""`make standalone`: each patch applies alone to pristine, or on the patches it declares, and its tests pass there.

A patch that needs earlier patches of the series names each in its message body, before the mail's `---`
line, with a trailer line `Depends-on: <subject of the patch it needs>`; it must be the subject of an earlier
patch. For each patch, in one scratch work tree of the pristine sdist (back to the `upstream` tag between
patches), applies its dependencies (transitively, in series order), then the patch itself, with `git am -3`,
and reports one line per patch. With `--tests`, also runs there the test files the patch itself adds or
changes, as `make bisect` does. With `--before` (implies `--tests`), also runs them on the patch's base without
its source change: its dependencies plus only the patch's files under `tests/`, where they are expected to fail
(that run never fails the verb); `--report DIR` writes per patch the tests that fail there, with the first line of
each error, to check what the commit message says fails before the change. `make check` runs the apply part.
"""

from __future__ import annotations

import argparse
import email
import email.policy
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .common import ROOT, UPSTREAM_TAG, ForkError, fetch_sdist, git_env, log, main_wrapper, read_series, read_upstream
from .materialize import build_tree


TRAILER = re.compile(r"Depends-on:(.*)", re.IGNORECASE)


@dataclass
class Result:
    patch: Path
    needs: list[Path] = field(default_factory=list)  # its dependencies, transitively, in series order
    error: str | None = None
    tests: str | None = None  # pytest's summary line, with `--tests`
    output: str = ""  # the end of pytest's output when the tests fail
    before: str | None = None  # with `--before`, pytest's summary line without the patch's source change
    failing_before: list[str] = field(default_factory=list)  # there, `FAILED <test> - <first line of its error>`

    def line(self) -> str:
        if self.error:
            state = f"FAILS: {self.error}"
        elif self.needs:
            state = "applies on " + ", ".join(p.name.split("-", 1)[0] for p in self.needs)
        else:
            state = "applies alone"
        before = f" | without its source change: {self.before}" if self.before else ""
        return f"{self.patch.name}: {state}" + (f"; {self.tests}{before}" if self.tests else "")


def read_mail(patch: Path) -> tuple[str, list[str]]:
    """A mail's subject (unfolded, without `[PATCH...]`) and the subjects its `Depends-on:` trailers name."""
    raw = patch.read_bytes()
    subject = str(email.message_from_bytes(raw, policy=email.policy.default)["Subject"] or "")
    subject = " ".join(re.sub(r"^\s*\[PATCH[^\]]*\]", "", subject).split())
    body = raw.decode("utf-8", "replace").replace("\r\n", "\n").partition("\n\n")[2]
    depends: list[str] = []
    continued = False
    for line in body.split("\n"):
        if line == "---":
            break
        if continued and line[:1] in (" ", "\t") and line.strip():
            depends[-1] += " " + line.strip()
            continue
        match = TRAILER.match(line)
        continued = bool(match)
        if match:
            depends.append(match[1].strip())
    return subject, [" ".join(d.split()) for d in depends]


def resolve(patches: list[Path]) -> list[Result]:
    """Each patch with its dependencies, transitively; a `Depends-on:` that names no earlier patch is an error."""
    mails = [read_mail(p) for p in patches]
    by_subject: dict[str, list[int]] = {}
    for i, (subject, _) in enumerate(mails):
        by_subject.setdefault(subject, []).append(i)
    results, needs = [], []
    for i, (patch, (_, depends)) in enumerate(zip(patches, mails)):
        closure, errors = set(), []
        for subject in depends:
            found = by_subject.get(subject, [])
            if not found:
                errors.append(f"Depends-on names no patch of the series: {subject!r}")
            elif len(found) > 1:
                errors.append(f"Depends-on names {len(found)} patches of the same subject: {subject!r}")
            elif found[0] == i:
                errors.append("Depends-on names the patch itself (a cycle)")
            elif found[0] > i:
                errors.append(f"Depends-on names a later patch, {patches[found[0]].name} (it must come first)")
            else:
                closure |= {found[0], *needs[found[0]]}
        needs.append(closure)
        results.append(Result(patch, [patches[j] for j in sorted(closure)], "; ".join(errors) or None))
    return results


def am_failure(output: str) -> str:
    """What `git am -3` could not do, as one line: the files it could not merge, grouped by why."""
    kinds = {
        r"CONFLICT \(content\): Merge conflict in (.+)": "conflict in",
        r"CONFLICT \(modify/delete\): (\S+) deleted in HEAD": "changes files not in the tree:",
        r"error: sha1 information is lacking or useless \((.+)\)": "does not apply (made on another version) to",
        r"(CONFLICT .+)": "",
    }
    found: dict[str, list[str]] = {}
    for line in output.splitlines():
        for pattern, kind in kinds.items():
            if match := re.match(pattern, line):
                found.setdefault(kind, []).append(match[1])
                break
    reasons = [f"{kind} {', '.join(paths)}".strip() for kind, paths in found.items()]
    errors = [line.removeprefix("error: ") for line in output.splitlines() if line.startswith("error:")]
    return "; ".join(reasons or errors[:1] or output.strip().splitlines()[-1:] or ["git am failed"])


def check_one(
    tree: Path, result: Result, pytest_args: list[str] | None = None, config_root: Path = ROOT, before: bool = False
) -> None:
    """Check one patch in `tree`, a git work tree of the pristine sdist tagged `upstream`, and record the outcome.

    The objects that applying the patches writes go to a scratch object directory, dropped afterwards: `git am
    -3` finds in `tree` the blobs of pristine and of this patch's dependencies only, as in a checkout of the
    release, never those of another patch checked before. With `pytest_args` (a list, possibly empty), also runs
    the test files the patch adds or changes, with the pytest settings of `config_root`; with `before` as well,
    runs them again on the dependencies alone, with only the patch's test files (`test_*.py`) checked out.
    """
    if result.error:
        return
    with tempfile.TemporaryDirectory(dir=tree.parent) as objects:
        env = {
            **git_env(),
            "GIT_OBJECT_DIRECTORY": objects,
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": f"{tree}/.git/objects",
        }

        def scratch_git(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, env=env)

        try:
            for patch in [*result.needs, result.patch]:
                applied = scratch_git("am", "-3", str(patch))
                if applied.returncode != 0:
                    scratch_git("am", "--abort")
                    reason = am_failure(applied.stdout + applied.stderr)
                    result.error = reason if patch == result.patch else f"dependency {patch.name} fails: {reason}"
                    return
            if pytest_args is not None:
                changed = scratch_git("diff", "--name-only", "--diff-filter=d", "HEAD~1", "HEAD", "--", "tests")
                _run_tests(tree, result, changed.stdout.split(), pytest_args, config_root)
                if before and result.tests != "no tests":
                    # the patch's base, then its added and changed test files (a deleted one stays: unrun); its other
                    # files under tests/ (a `conftest.py`) are part of its change
                    patched = scratch_git("rev-parse", "HEAD").stdout.strip()
                    scratch_git("checkout", "--quiet", "--detach", "HEAD~1")
                    test_files = [path for path in changed.stdout.split() if Path(path).name.startswith("test_")]
                    scratch_git("checkout", patched, "--", *test_files)
                    scratch_git("clean", "-fdxq")  # the bytecode of the patched sources
                    _run_tests(tree, result, changed.stdout.split(), pytest_args, config_root, before=True)
        finally:
            scratch_git("checkout", "--quiet", "--force", "--detach", UPSTREAM_TAG)
            scratch_git("clean", "-fdxq")  # with the bytecode of the files the patches changed


def _run_tests(
    tree: Path, result: Result, changed: list[str], pytest_args: list[str], config_root: Path, before: bool = False
) -> None:
    tests = [str(tree / p) for p in changed if Path(p).name.startswith("test_") and p.endswith(".py")]
    if not tests:
        result.tests = "no tests"
        return
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    if before:
        env["COLUMNS"] = "1000"  # else `-rf` cuts a failure's error, or drops it after a long test id
    # the repository's pytest settings (markers), the scratch tree's code and tests, its root as pytest's (the test
    # ids of files outside pytest's root dir lose their path) and the top of the conftest files it reads (the
    # repository's own `conftest.py` is not the tree's); `-rf`: a line per failed test
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(config_root / "pyproject.toml"),
           "--rootdir", str(tree), "--confcutdir", str(tree), *(["-rf"] if before else []), *pytest_args,
           *tests]  # fmt: skip
    run = subprocess.run(cmd, cwd=tree.parent, env=env, capture_output=True, text=True)
    summary = (run.stdout.strip().splitlines() or ["(no output)"])[-1]
    if before:
        # pytest names them from its working directory, the tree's parent
        found = failures(run.stdout.replace(f"{tree}/", ""))
        result.failing_before = [line.replace(f" {tree.name}/", " ", 1) for line in found]
        errors = sum(line.startswith("ERROR collecting") for line in result.failing_before)
        result.before = f"errors during collection: {errors} ({summary})" if errors else summary
        return
    result.tests = f"{len(tests)} test files, {summary}"
    if run.returncode != 0:
        result.error = "its tests fail"
        result.output = run.stdout[-3000:]


def failures(output: str) -> list[str]:
    """The failed tests of pytest's `-rf` short summary, then each test file it could not collect with the first
    `E` line of its error (the short summary names such a file without its error)."""
    failed = [line for line in output.splitlines() if line.startswith("FAILED ")]
    collecting = None
    for line in output.splitlines():
        if match := re.fullmatch(r"_+ ERROR collecting (.+?) _+", line):
            collecting = match[1]
            failed.append(f"ERROR collecting {collecting}")
        elif collecting and line.startswith("E "):
            failed[-1] += f" - {line[1:].strip()}"
            collecting = None
    return failed


def check_standalone(tree: Path, patches: list[Path]) -> list[Result]:
    """The apply part for every patch of the series, in `tree` (see `check_one`); `make check` runs it."""
    results = resolve(patches)
    for result in results:
        check_one(tree, result)
    return results


def standalone(
    root: Path,
    pytest_args: list[str] | None = None,
    only: list[str] | None = None,
    before: bool = False,
    report: Path | None = None,
) -> bool:
    upstream, patches = read_upstream(root), read_series(root)
    results = [r for r in resolve(patches) if not only or r.patch.name.startswith(tuple(only))]
    if only and not results:
        raise ForkError(f"no patch of the series starts with {', '.join(only)}")
    sdist = fetch_sdist(upstream)
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        build_tree(tree, upstream, [], sdist)
        for result in results:
            check_one(tree, result, pytest_args, root, before)
            print(result.line(), flush=True)
            if result.output:
                print(result.output, flush=True)
            if report and result.before:
                report.mkdir(parents=True, exist_ok=True)
                lines = [result.line(), *result.failing_before]
                (report / f"{result.patch.stem}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return not any(r.error for r in results)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    parser.add_argument("--tests", action="store_true", help="also run each patch's own tests on its tree")
    parser.add_argument(
        "--before", action="store_true", help="with --tests (implied), also on its base without its source change"
    )
    parser.add_argument("--report", type=Path, help="with --before, a folder for a file per patch of what fails there")
    parser.add_argument(
        "--only", action="append", help="only the patches whose names start with these, e.g. 0005,0007"
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments with --tests, e.g. -n 2")
    args = parser.parse_args()
    if args.report and not args.before:
        parser.error("--report goes with --before")
    only = [prefix for arg in args.only or [] for prefix in arg.split(",") if prefix]
    pytest_args = args.pytest_args if args.tests or args.before else None
    if not standalone(args.root.resolve(), pytest_args, only, args.before, args.report):
        log("some patches do not apply alone, or on the patches their Depends-on trailers name")
        return 1
    return 0


if __name__ == "__main__":
    main_wrapper(main)
