"""The two trees the benchmark imports: the pristine upstream sdist (extracted once, here) and the fork."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from forktool.common import ROOT, extract_sdist, fetch_sdist, read_upstream, sha256_of


BENCH_DIR = ROOT / ".bench"


def pristine_tree(root: Path = ROOT, bench_dir: Path | None = None) -> Path:
    """The pristine upstream tree `<bench_dir>/upstream-<version>/`, extracted from the verified sdist once.

    Idempotent: a `.complete` marker holding the sdist's sha256 says the folder is whole; a partial or stale folder
    is replaced. The extraction goes to a temporary folder first and is renamed into place. Safe to call from several
    processes at once (the tests run in parallel on a fresh clone): an exclusive lock on `<dest>.lock` makes one of
    them extract while the others wait and then find the marker, so none removes a tree another is importing.
    """
    bench_dir = bench_dir or root / ".bench"
    upstream = read_upstream(root)
    sdist = fetch_sdist(upstream)
    digest = sha256_of(sdist)
    dest = bench_dir / f"upstream-{upstream.version}"
    marker = dest / ".complete"

    def complete() -> bool:
        return marker.is_file() and marker.read_text(encoding="utf-8").strip() == digest

    if complete():
        return dest
    bench_dir.mkdir(parents=True, exist_ok=True)
    with open(bench_dir / f"upstream-{upstream.version}.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete():
            return dest
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


def tree_env(src: Path, threads: int, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that measures the tree under `src` (`environ`, by default this process's, with):
    `PYTHONPATH` the tree first, then `utils/`; `threads` threads for torch's ops and the kernels inductor generates
    (see utils/bench/README.md: with two, each op waits for both, and on a busy machine one of them is often
    descheduled); inductor compiling in the process, unless set otherwise (no pool of workers left competing with the
    timed calls for the cores)."""
    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT / "utils")])
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    return env


def imports_tree(file: str, src: Path) -> bool:
    """Whether `file` (a process's `transformers.__file__`) is in the tree under `src`."""
    return Path(file).resolve().is_relative_to((src / "transformers").resolve())


def run_measure(
    command: list[str], env: dict[str, str], json_path: Path, log_path: Path, src: Path, what: str, on_progress=None
) -> dict:
    """Runs one measuring process from the repository's root, its output into `log_path` (each of its `progress: `
    lines also to `on_progress`, as it comes), and returns the JSON it wrote into `json_path`, checked to come from the
    tree under `src` (a RuntimeError naming `what` otherwise: its exit status and its log's end, or the tree it
    imported)."""
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, text=True, bufsize=1
        )
        for line in process.stdout:
            log.write(line)
            if on_progress is not None and line.startswith("progress: "):
                on_progress(line[len("progress: ") :].strip())
        code = process.wait()
    if code != 0:
        tail = "\n".join(log_path.read_text(encoding="utf-8").splitlines()[-15:])
        raise RuntimeError(f"{what} failed (exit status {code}); its log {log_path} ends with:\n{tail}")
    result = json.loads(json_path.read_text(encoding="utf-8"))
    if not imports_tree(result["transformers_file"], src):
        raise RuntimeError(f"{what} imported {result['transformers_file']}, not the tree under {src}")
    return result


def run_rounds(
    module: str, sources: dict[str, Path], rounds: int, out: Path, tmp: Path, worker_args: list[str]
) -> dict[str, list[dict]]:
    """Runs `python -m <module> --worker --json <file> <worker_args>` once per tree of `sources` (name: its `src`) and
    round, the trees alternating, each in its own process with that tree first on `PYTHONPATH` and an inductor cache
    of its own under `tmp` (warm after its first round). Returns each run's JSON, per tree; the raw files stay in
    `out`."""
    results: dict[str, list[dict]] = {name: [] for name in sources}
    for round_ in range(rounds):
        for index, (name, src) in enumerate(sources.items()):
            raw = out / f"tree{index}-round{round_ + 1}.json"
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(ROOT / "utils")]))
            env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / f"inductor-tree{index}")
            cmd = [sys.executable, "-m", module, "--worker", "--json", str(raw), *worker_args]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"{module} on {name}, round {round_ + 1}, failed:\n{done.stderr[-4000:]}")
            results[name].append(json.loads(raw.read_text(encoding="utf-8")))
            print(f"round {round_ + 1}/{rounds}: {name}", flush=True)
    return results


def write_results(out: Path, text: str, results: dict[str, list[dict]]) -> None:
    """`text` (the table and how it was measured) into `out/table.md` and on screen, the runs into `results.json`."""
    (out / "table.md").write_text(text, encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(text + f"\nwritten to {out.relative_to(ROOT)}")
