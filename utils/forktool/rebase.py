"""`make rebase UPSTREAM=<version>`: move the patch series onto another upstream release, merging in three ways.

The work tree `.fork-rebase/<version>/` is a git repository: the pinned release as a commit (tag
`upstream-<old>`), the series applied on it with `git am` (branch `series-<old>`), and the new release's sdist
contents as a commit on top of the old release (tags `upstream` and `upstream-<new>`). `git rebase` then moves
the series onto the new release (branch `fork`): since both releases are in the history, a patch whose context
changed is merged in three ways, and what stops the rebase is a real conflict with upstream's changes.

One line per patch: `applied` (its diff applies to the new base as it is), `merged` (it needed the three-way
merge), `conflict: <files>` (the rebase stopped there, with the conflict in the work tree), `resolved`, `dropped`
(it became empty: upstream carries it; or it was skipped), `pending` (after a conflict, with a forecast of
what picking it now would do, each conflicting patch left out). After resolving a conflict, `make
rebase-continue UPSTREAM=<version>` goes on. Once every patch is on the new release, `make rebase-finish
UPSTREAM=<version>` exports the series to `patches/` (as `make patches` does) and pins `patches/UPSTREAM` to the
new release and its sdist's sha256. Everything the verbs need between runs is kept in the work tree's `.git`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .common import (
    ROOT,
    UPSTREAM_TAG,
    WORK_BRANCH,
    ForkError,
    Upstream,
    extract_sdist,
    fetch_sdist,
    git,
    git_env,
    log,
    main_wrapper,
    read_series,
    read_upstream,
    sha256_of,
)
from .export import export
from .materialize import build_tree, read_state, series_stamp


STATE_FILE = "fork-rebase.json"
# refs/fork-rebase/<NNNN>: the rebased commit of the NNNN-th patch, written by the rebase's todo list as each pick
# is committed (by this tool or by a `git rebase --continue` run by hand). Equal to the previous one: dropped.
DONE_REF = "refs/fork-rebase/"


@dataclass
class PatchState:
    name: str
    kind: str  # applied, merged, conflict, resolved, skipped, empty, pending
    files: list[str] = field(default_factory=list)
    note: str = ""  # for a forecast conflict: the patches left out that it needs
    forecast: PatchState | None = None  # for a pending patch: what picking it would do (see `forecast`)


def work_tree(root: Path, version: str) -> Path:
    return root / ".fork-rebase" / version


def shown(work: Path) -> str:
    """`work` as the user can type it: relative to the current directory when inside it."""
    return os.path.relpath(work) if work.resolve().is_relative_to(Path.cwd().resolve()) else str(work)


def run_git(work: Path, *args: str, env: dict[str, str] | None = None, input: str | None = None):
    return subprocess.run(
        ["git", "-C", str(work), *args], capture_output=True, text=True, input=input, env={**git_env(), **(env or {})}
    )


def rev(work: Path, name: str) -> str | None:
    result = git(work, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", check=False)
    return result.stdout.strip() or None


def read_rebase_state(work: Path) -> dict:
    path = work / ".git" / STATE_FILE
    if not path.exists():
        raise ForkError(f"no rebase in {work}: start one with `make rebase UPSTREAM={work.name}`")
    return json.loads(path.read_text(encoding="utf-8"))


def write_rebase_state(work: Path, state: dict) -> None:
    (work / ".git" / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")


def commit_release(work: Path, upstream: Upstream, sdist: Path, parent: str) -> str:
    """Commit the contents of `sdist` as a child of `parent`, without touching the work tree; return the commit."""
    with tempfile.TemporaryDirectory(dir=work.parent) as tmp:
        contents = Path(tmp) / "contents"
        contents.mkdir()
        extract_sdist(sdist, contents)
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        for args in (["--work-tree", str(contents), "add", "--all"], ["write-tree"]):
            result = run_git(work, *args, env=env)
            if result.returncode != 0:
                raise ForkError(f"committing {sdist.name} failed at `git {' '.join(args)}`:\n{result.stderr.strip()}")
    message = (
        f"upstream {upstream.name} {upstream.version}\n\n"
        f"Pristine contents of {upstream.sdist_name} (sha256 {upstream.sha256}).\n"
    )
    return git(work, "commit-tree", result.stdout.strip(), "-p", parent, "-m", message).stdout.strip()


def start(root: Path, version: str, sha256: str | None, work: Path, run: bool = True) -> dict:
    """Build `work` and, if `run`, start the rebase there; return its state (it may have stopped at a conflict)."""
    current = read_upstream(root)
    if version == current.version:
        raise ForkError(f"the series is on {current.name} {version} already")
    patches = read_series(root)
    old_sdist = fetch_sdist(current)
    new_sdist = fetch_sdist(Upstream(current.name, version, sha256.lower() if sha256 else None))
    new = Upstream(current.name, version, sha256_of(new_sdist))
    log(f"building {work}: {current.sdist_name} + {len(patches)} patches, then {new.sdist_name}")
    work.parent.mkdir(parents=True, exist_ok=True)
    results = build_tree(work, current, patches, old_sdist)
    failed = [r for r in results if not r.applied]
    if failed:
        shutil.rmtree(work)
        raise ForkError(
            f"{failed[0].patch.name} does not apply to {current.name} {current.version} itself (see `make check`):\n"
            f"{failed[0].message}"
        )
    old_commit = rev(work, UPSTREAM_TAG)
    git(work, "tag", f"upstream-{current.version}", old_commit)
    git(work, "branch", f"series-{current.version}", WORK_BRANCH)
    commits = git(work, "rev-list", "--reverse", f"{old_commit}..{WORK_BRANCH}").stdout.split()
    subjects = [git(work, "log", "-1", "--format=%s", c).stdout.strip() for c in commits]
    new_commit = commit_release(work, new, new_sdist, old_commit)
    git(work, "tag", "--force", UPSTREAM_TAG, new_commit)
    git(work, "tag", f"upstream-{version}", new_commit)
    # conflicts show the old release's lines too, between `|||||||` and `=======`
    git(work, "config", "merge.conflictStyle", "diff3")
    state = {
        "name": current.name,
        "old": current.version,
        "new": version,
        "sha256": new.sha256,
        "sha256_given": bool(sha256),
        "stamp": series_stamp(current, patches),
        "old_commit": old_commit,
        "new_commit": new_commit,
        "patches": [{"name": p.name, "commit": c} for p, c in zip(patches, commits)],
        "conflicts": {},
    }
    write_rebase_state(work, state)
    if not run:
        return state
    if not patches:
        git(work, "reset", "--quiet", "--hard", new_commit)
        return state
    todo = work / ".git" / "fork-rebase-todo"
    todo.write_text(
        "".join(
            f"pick {c} {subject}\nexec git update-ref {DONE_REF}{i:04d} HEAD\n"
            for i, (c, subject) in enumerate(zip(commits, subjects), 1)
        ),
        encoding="utf-8",
    )
    # the todo list is ours: one pick per patch, each followed by the line that records its rebased commit
    env = {"GIT_SEQUENCE_EDITOR": f"cp {shlex.quote(str(todo))}", "GIT_EDITOR": "true"}
    result = run_git(
        work, "rebase", "--interactive", "--empty=drop", "--onto", new_commit, old_commit, WORK_BRANCH, env=env
    )
    after_rebase_step(work, state, result)
    return state


def in_progress(work: Path) -> bool:
    return (work / ".git" / "rebase-merge").is_dir()


def check_not_aborted(work: Path, state: dict) -> None:
    """After `git rebase --abort`, the branch is the series on the old release again: nothing to go on with."""
    on_new = git(work, "merge-base", "--is-ancestor", state["new_commit"], WORK_BRANCH, check=False).returncode == 0
    if not in_progress(work) and not on_new:
        raise ForkError(
            f"the rebase in {shown(work)} was aborted; start again with `make rebase UPSTREAM={state['new']} FORCE=1`"
        )


def unmerged_files(work: Path) -> list[str]:
    return git(work, "diff", "--name-only", "--diff-filter=U").stdout.split()


def stopped_at(work: Path, state: dict) -> int | None:
    """The index of the patch the rebase stopped at with a conflict, or None."""
    if not in_progress(work):
        return None
    head = rev(work, "REBASE_HEAD")
    return next((i for i, p in enumerate(state["patches"]) if p["commit"] == head), None)


def after_rebase_step(work: Path, state: dict, result: subprocess.CompletedProcess) -> None:
    """Record the conflict the rebase stopped at; a failure that is no conflict is an error."""
    index = stopped_at(work, state)
    if index is not None:
        key = f"{index + 1:04d}"
        if key not in state["conflicts"]:
            state["conflicts"][key] = unmerged_files(work)
            write_rebase_state(work, state)
        return
    if result.returncode != 0:
        raise ForkError(f"git rebase failed in {work}:\n{(result.stderr or result.stdout).strip()}")


def diff_applies(work: Path, commit: str, parent: str) -> bool:
    """Whether the diff of `commit` applies with `git apply` (no merge) to the tree of `parent`."""
    diff = git(work, "diff", "--binary", "--no-renames", f"{commit}^", commit).stdout
    with tempfile.TemporaryDirectory(dir=work.parent) as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if run_git(work, "read-tree", parent, env=env).returncode != 0:
            return False
        return run_git(work, "apply", "--cached", "--check", "-", env=env, input=diff).returncode == 0


def patch_states(work: Path, state: dict) -> list[PatchState]:
    stopped = stopped_at(work, state)
    parent = state["new_commit"]
    states = []
    for i, patch in enumerate(state["patches"]):
        key = f"{i + 1:04d}"
        conflict = state["conflicts"].get(key)
        done = rev(work, DONE_REF + key)
        if done:
            if done == parent:
                states.append(
                    PatchState(patch["name"], "skipped" if conflict is not None else "empty", conflict or [])
                )
            elif conflict is not None:
                states.append(PatchState(patch["name"], "resolved", conflict))
            else:
                kind = "applied" if diff_applies(work, patch["commit"], parent) else "merged"
                states.append(PatchState(patch["name"], kind))
            parent = done
        elif i == stopped:
            states.append(PatchState(patch["name"], "conflict", unmerged_files(work) or conflict or []))
        else:
            states.append(PatchState(patch["name"], "pending"))
    if stopped is not None:
        left_out = [i for i, s in enumerate(states) if s.kind == "skipped"] + [stopped]
        ahead = forecast(work, state, stopped + 1, git(work, "rev-parse", "HEAD").stdout.strip(), left_out)
        for pending, then in zip(states[stopped + 1 :], ahead):
            pending.forecast = then
    return states


def forecast(work: Path, state: dict, first: int, tip: str, left_out: list[int]) -> list[PatchState]:
    """What picking the patches from index `first` onto the commit `tip` would do, each conflicting one left out.

    Each pick is the three-way merge `git rebase` makes (the patch's parent as the base), done by `git merge-tree`
    on objects only: neither the work tree nor a branch changes. `left_out` are patches already left out. A
    conflict is also tried on the old release with the same patches left out: when it conflicts there too, it
    needs a patch left out (named in its note) rather than conflicting with upstream alone.
    """
    patches, left_out = state["patches"], list(left_out)

    def commit_tree(tree: str, *parents: str) -> str:
        args = [arg for parent in parents for arg in ("-p", parent)]
        return git(work, "commit-tree", tree, *args, "-m", "forecast").stdout.strip()

    def pick(tip: str, i: int) -> tuple[str | None, list[str]]:
        """Pick patch `i` onto `tip`: (the new tip, or None when the patch is empty there; conflicting files)."""
        commit = patches[i]["commit"]
        base = commit_tree(f"{commit}^^{{tree}}")
        ours, theirs = commit_tree(f"{tip}^{{tree}}", base), commit_tree(f"{commit}^{{tree}}", base)
        merge = git(work, "merge-tree", "--write-tree", "--name-only", "--no-messages", ours, theirs, check=False)
        lines = [line for line in merge.stdout.splitlines() if line]
        if merge.returncode not in (0, 1):
            raise ForkError(f"git merge-tree failed in {work}:\n{merge.stderr.strip()}")
        if merge.returncode == 1:
            return tip, lines[1:]
        if lines[0] == git(work, "rev-parse", f"{tip}^{{tree}}").stdout.strip():
            return None, []
        return commit_tree(lines[0], tip), []

    def files_of(i: int) -> set[str]:
        commit = patches[i]["commit"]
        return set(git(work, "diff", "--name-only", "--no-renames", f"{commit}^", commit).stdout.split())

    old_tip = state["old_commit"]  # the old release with the patches not left out, for a conflict's cause
    for i in range(first):
        if i not in left_out:
            old_tip = pick(old_tip, i)[0] or old_tip
    states = []
    for i in range(first, len(patches)):
        name = patches[i]["name"]
        new_tip, files = pick(tip, i)
        old_pick, old_files = pick(old_tip, i)
        if files:
            needs = [patches[j]["name"][:4] for j in left_out if files_of(j) & set(files)] if old_files else []
            states.append(PatchState(name, "conflict", files, f"needs {', '.join(needs)}, left out" if needs else ""))
            left_out.append(i)
            continue
        old_tip = old_pick or old_tip
        if new_tip is None:
            states.append(PatchState(name, "empty"))
        else:
            states.append(PatchState(name, "applied" if diff_applies(work, patches[i]["commit"], tip) else "merged"))
            tip = new_tip
    return states


def finished(work: Path, states: list[PatchState]) -> bool:
    return not in_progress(work) and all(s.kind not in ("conflict", "pending") for s in states)


FORECAST_WORDS = {"applied": "apply", "merged": "merge", "conflict": "conflict", "empty": "be empty"}


def describe(state: PatchState, new: str) -> str:
    files = ", ".join(state.files) or "?"
    if state.kind == "pending" and state.forecast:
        then = state.forecast
        detail = f": {', '.join(then.files)}" + (f" ({then.note})" if then.note else "") if then.files else ""
        return f"pending; would {FORECAST_WORDS[then.kind]}{detail}"
    return {
        "applied": "applied",
        "merged": "merged",
        "conflict": f"conflict: {files}",
        "resolved": f"resolved (conflict in {files})",
        "skipped": f"dropped (skipped at its conflict in {files})",
        "empty": f"dropped (empty on {new}: upstream carries it)",
        "pending": "pending",
    }[state.kind]


def print_report(work: Path, state: dict) -> bool:
    """Print one line per patch and the next step; return whether the whole series is on the new release."""
    states = patch_states(work, state)
    name, new, old = state["name"], state["new"], state["old"]
    where = shown(work)
    width = max((len(s.name) for s in states), default=0)
    print(f"series on {name} {new} (from {old}), in {where}:")
    for s in states:
        print(f"  {s.name:<{width}}  {describe(s, new)}")
    counts: dict[str, int] = {}
    for s in states:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    ahead: dict[str, int] = {}
    for s in states:
        if s.forecast:
            ahead[s.forecast.kind] = ahead.get(s.forecast.kind, 0) + 1
    forecast_counts = ", ".join(f"{n} {FORECAST_WORDS[kind]}" for kind, n in ahead.items())
    print(
        ", ".join(f"{n} {kind}" for kind, n in counts.items()) + (f" (would: {forecast_counts})" if ahead else "")
        or "no patches"
    )
    if finished(work, states):
        print(
            f"The whole series is on {name} {new}. Look at it in {where} (`git -C {where} range-diff "
            f"upstream-{old}..series-{old} upstream..fork` compares it with the old one), then run\n"
            f"  make rebase-finish UPSTREAM={new}\n"
            f"to write it into patches/ and pin patches/UPSTREAM to {new} (sha256 {state['sha256']})."
        )
        return True
    conflict = next((s for s in states if s.kind == "conflict"), None)
    if conflict is None and not in_progress(work):
        print(
            f"The rebase in {where} is not in progress (aborted?): start again with `make rebase UPSTREAM={new} FORCE=1`."
        )
        return False
    if conflict is None:
        print(f"The rebase in {where} stopped without a conflict: see `git -C {where} status`.")
        return False
    files = " ".join(shlex.quote(f) for f in conflict.files)
    print(
        f"Stopped at {conflict.name}: its change and upstream's overlap. The rebase is in progress in {where}.\n"
        f"  1. Edit {', '.join(conflict.files)} in {where}: between <<<<<<< and ||||||| is {new} with the patches\n"
        f"     before this one, between ||||||| and ======= {old}, between ======= and >>>>>>> this patch. Keep what\n"
        f"     both changes mean, remove the markers (`git -C {where} status` also names files upstream deleted).\n"
        f"  2. git -C {where} add {files}\n"
        f"  3. make rebase-continue UPSTREAM={new}\n"
        f"If {new} already does what the patch did, drop it: `git -C {where} rebase --skip`, then step 3.\n"
        f"To give up: `git -C {where} rebase --abort` and delete {where}; patches/ is unchanged.\n"
        f"(`would ...` after `pending`: a forecast from picking the pending patches now, each conflict left out.)"
    )
    return False


def rebase(root: Path, version: str, sha256: str | None = None, force: bool = False) -> bool:
    """`make rebase`: start the rebase in `.fork-rebase/<version>`; return whether it went through without stopping."""
    work = work_tree(root, version)
    if work.exists():
        if not force:
            raise ForkError(
                f"{work} exists: continue that rebase with `make rebase-continue UPSTREAM={version}`, or start "
                f"again (dropping it) with `make rebase UPSTREAM={version} FORCE=1`"
            )
        shutil.rmtree(work)
    state = start(root, version, sha256, work)
    verified = "verified against the given sha256" if state["sha256_given"] else "computed from the download"
    log(f"{state['name']} {version} sdist sha256 {state['sha256']} ({verified})")
    return print_report(work, state)


def continue_rebase(root: Path, version: str) -> bool:
    """`make rebase-continue`: commit the resolved conflict and go on; return whether the series is all on."""
    work = work_tree(root, version)
    state = read_rebase_state(work)
    check_not_aborted(work, state)
    if in_progress(work):
        after_rebase_step(work, state, subprocess.CompletedProcess([], 0))
        unmerged = unmerged_files(work)
        if unmerged:
            print_report(work, state)
            log(f"still unresolved: {', '.join(unmerged)} (edit, then `git -C {shown(work)} add` them)")
            return False
        check = git(work, "diff", "--cached", "--check", check=False).stdout
        markers = [line for line in check.splitlines() if "leftover conflict marker" in line]
        if markers:
            raise ForkError(
                "conflict markers are left in what is staged; remove them and `git add` again:\n" + "\n".join(markers)
            )
        result = run_git(work, "rebase", "--continue", env={"GIT_EDITOR": "true"})
        after_rebase_step(work, state, result)
    return print_report(work, state)


def write_pin(root: Path, version: str, sha256: str) -> None:
    """Set `version` and `sha256` in `patches/UPSTREAM`, keeping its comments and layout."""
    path = root / "patches" / "UPSTREAM"
    text = path.read_text(encoding="utf-8")
    for key, value in (("version", version), ("sha256", sha256)):
        text, n = re.subn(rf"^(\s*{key}\s*=\s*)\S*", lambda m, v=value: m[1] + v, text, count=1, flags=re.MULTILINE)
        if n != 1:
            raise ForkError(f"{path}: no `{key} = ...` line to update")
    path.write_text(text, encoding="utf-8")


def finish(root: Path, version: str) -> list[str]:
    """`make rebase-finish`: export the rebased series to `patches/` and pin the new release; return what changed."""
    work = work_tree(root, version)
    state = read_rebase_state(work)
    check_not_aborted(work, state)
    states = patch_states(work, state)
    if not finished(work, states):
        raise ForkError(
            f"the rebase onto {version} is not through yet (see `make rebase-continue UPSTREAM={version}`)"
        )
    current, patches = read_upstream(root), read_series(root)
    if series_stamp(current, patches) != state["stamp"]:
        raise ForkError(
            f"patches/ or patches/UPSTREAM changed since this rebase started; start it again with "
            f"`make rebase UPSTREAM={version} FORCE=1`"
        )
    if git(work, "symbolic-ref", "--quiet", "HEAD", check=False).stdout.strip() != f"refs/heads/{WORK_BRANCH}":
        raise ForkError(f"{work} is not on its branch `{WORK_BRANCH}`: `git -C {work} checkout {WORK_BRANCH}` first")
    fork = root / ".fork"
    if (fork / ".git").is_dir():
        head = git(fork, "rev-parse", "HEAD", check=False).stdout.strip()
        if git(fork, "status", "--porcelain").stdout.strip() or head != read_state(fork).get("head"):
            raise ForkError(
                f"{fork} holds commits or edits that patches/ does not: export them (`make patches`) and rebase "
                f"again, or drop them (`make fork FORCE=1`); finishing now would leave them on {current.version}"
            )
    commit = release_commit(root, current)
    # the sdist is verified again (from the cache) against the sha256 that is about to be pinned
    fetch_sdist(Upstream(state["name"], version, state["sha256"]))
    changed = export(root, work)
    if commit is not None:
        record_release(root, current.version, commit)
    write_pin(root, version, state["sha256"])
    pinned = read_upstream(root)
    assert (pinned.version, pinned.sha256) == (version, state["sha256"]), pinned
    return [*changed, *(["RELEASES"] if commit is not None else []), "UPSTREAM"]


RELEASES_HEADER = """\
# The release series this fork carried before the one pinned in patches/UPSTREAM: the upstream version each followed,
# and the commit of main that last pinned it. Install one with `pip install "git+<fork-url>@<commit>"`.
# `make rebase-finish` appends a line when the series moves to a new release.
"""


def release_commit(root: Path, old: Upstream) -> str | None:
    """
    The commit of the repository at `root` (main's HEAD) that carries the series on the release it is about to leave,
    `None` when `root` is not the top of a git repository. Refuses while `patches/` holds changes that are not committed
    there, or when that commit does not pin `old`: the commit recorded must install the old series as it was.
    """
    top = git(root, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
        return None
    if git(root, "status", "--porcelain", "--", "patches").stdout.strip():
        raise ForkError(
            f"patches/ holds changes that are not committed: commit them first, so that the commit recorded in "
            f"patches/RELEASES installs the series on {old.version} as it is"
        )
    commit = git(root, "rev-parse", "HEAD").stdout.strip()
    pinned = git(root, "show", f"{commit}:patches/UPSTREAM", check=False).stdout
    if not re.search(rf"^version\s*=\s*{re.escape(old.version)}\s*$", pinned, flags=re.MULTILINE):
        raise ForkError(
            f"the commit {commit[:12]} does not pin {old.version} in patches/UPSTREAM: commit the pin first"
        )
    return commit


def record_release(root: Path, version: str, commit: str) -> None:
    """Append `<version> <commit>` to `patches/RELEASES` (created with its header when missing)."""
    path = root / "patches" / "RELEASES"
    text = path.read_text(encoding="utf-8") if path.is_file() else RELEASES_HEADER
    path.write_text(text + f"{version} {commit}\n", encoding="utf-8")


def read_releases(root: Path = ROOT) -> dict[str, str]:
    """`patches/RELEASES` as `{version: commit}` (empty when there is none)."""
    path = root / "patches" / "RELEASES"
    if not path.is_file():
        return {}
    pairs = (line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.split("#", 1)[0].strip())
    return dict(pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="upstream release to rebase onto, e.g. 5.24.0")
    parser.add_argument("--sha256", help="expected sha256 of that release's sdist (verified before use)")
    parser.add_argument("--force", action="store_true", help="start again, dropping an existing rebase of it")
    verb = parser.add_mutually_exclusive_group()
    verb.add_argument("--continue", dest="cont", action="store_true", help="go on after resolving a conflict")
    verb.add_argument("--finish", action="store_true", help="export the rebased series and pin the release")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args()
    root = args.root.resolve()
    if args.finish:
        changed = finish(root, args.version)
        state = read_rebase_state(work_tree(root, args.version))
        log(f"patches/: {', '.join(changed)} changed; patches/UPSTREAM pins {state['name']} {args.version}")
        if not state["sha256_given"]:
            log(f"the sha256 {state['sha256']} was computed from the download: compare it with the package index")
        log("next: `make fork` (rebuilds .fork on the new release), `make check`, `make test`, then commit patches/")
        return 0
    if args.cont:
        return 0 if continue_rebase(root, args.version) else 1
    return 0 if rebase(root, args.version, args.sha256, args.force) else 1


if __name__ == "__main__":
    main_wrapper(main)
