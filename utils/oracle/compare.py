"""Compares two sides' results of `oracle.matrix`: per model and cache, identical (the same sequences, exactly equal
scores), the same error on both sides, or a difference. `python -m oracle.compare A.pt B.pt` prints the report."""

from __future__ import annotations

import sys

import torch


CACHES = ("static", "dynamic")


def _ran(entry: dict, cache: str) -> bool:
    return "sequences" in entry.get(cache, {})


def _run_difference(a: dict, b: dict) -> str | None:
    """None when both runs give the same sequences and exactly the same scores, else what differs."""
    if a["sequences"].shape != b["sequences"].shape:
        return f"sequence shapes {tuple(a['sequences'].shape)} vs {tuple(b['sequences'].shape)}"
    if a["scores"].shape != b["scores"].shape:
        return f"score shapes {tuple(a['scores'].shape)} vs {tuple(b['scores'].shape)}"
    same_sequences = torch.equal(a["sequences"], b["sequences"])
    same_scores = torch.allclose(a["scores"], b["scores"], rtol=0, atol=0, equal_nan=True)  # exactly equal
    if same_sequences and same_scores:
        return None
    delta = torch.where(
        a["scores"] == b["scores"], 0.0, (a["scores"] - b["scores"]).abs().nan_to_num(nan=float("inf"))
    )
    detail = f"max |d score| {delta.max().item():.3e}"
    if not same_sequences:
        positions = (a["sequences"] != b["sequences"]).nonzero().tolist()
        detail = f"sequences differ at {len(positions)} positions, first {positions[:4]}; {detail}"
    return detail


def compare(a: dict, b: dict) -> dict:
    """Counts and the list of differences between the results `a` and `b` of two sides."""
    counts = {"ran_on_both": 0, "identical": 0, "same_error": 0, "not_built": 0}
    differences = []
    if a["transformers_file"] == b["transformers_file"]:
        differences.append(("-", "trees", f"both sides imported {a['transformers_file']}"))
    for name, side in (("A", a), ("B", b)):
        if side["tree_digest_start"] != side["tree_digest_end"]:
            differences.append(("-", "trees", f"{name}'s tree changed on disk during its run"))
    if not a["models"] and not b["models"]:
        differences.append(("-", "models", "no model type was run"))
    for model in dict.fromkeys([*a["models"], *b["models"]]):
        entry_a, entry_b = a["models"].get(model), b["models"].get(model)
        if entry_a is None or entry_b is None:
            differences.append((model, "-", f"missing in {'A' if entry_a is None else 'B'}"))
            continue
        if "build" in entry_a or "build" in entry_b:
            error_a, error_b = (
                (entry["build"]["error_type"], entry["build"]["error"]) if "build" in entry else None
                for entry in (entry_a, entry_b)
            )
            if error_a is not None and error_a == error_b:
                counts["not_built"] += 1
            else:
                differences.append((model, "build", f"A: {entry_a.get('build')}, B: {entry_b.get('build')}"))
            continue
        if entry_a.get("weights") != entry_b.get("weights"):
            differences.append((model, "weights", "the initial weights differ"))
        for cache in CACHES:
            run_a, run_b = entry_a[cache], entry_b[cache]
            if _ran(entry_a, cache) and _ran(entry_b, cache):
                counts["ran_on_both"] += 1
                detail = _run_difference(run_a, run_b)
                if detail is None:
                    counts["identical"] += 1
                else:
                    differences.append((model, cache, detail))
            elif not _ran(entry_a, cache) and not _ran(entry_b, cache):
                if (run_a["error_type"], run_a["error"]) == (run_b["error_type"], run_b["error"]):
                    counts["same_error"] += 1
                else:
                    errors = f"A: {run_a['error_type']}: {run_a['error']} | B: {run_b['error_type']}: {run_b['error']}"
                    differences.append((model, cache, f"different errors: {errors}"))
            else:
                side, run = ("A", run_a) if not _ran(entry_a, cache) else ("B", run_b)
                differences.append((model, cache, f"only {side} raised {run['error_type']}: {run['error']}"))
    return {"counts": counts, "differences": differences}


def initializations(results: dict) -> dict:
    """With `--wrap`: the models whose static cache was initialized before the first forward, and those with layers
    initialized again (model -> count)."""
    early = [model for model, entry in results["models"].items() if entry.get("static", {}).get("early")]
    again = {
        model: entry["static"]["reinitialized"]
        for model, entry in results["models"].items()
        if entry.get("static", {}).get("reinitialized")
    }
    return {"early": early, "reinitialized": again}


def report(a: dict, b: dict) -> str:
    compared = compare(a, b)
    counts, differences = compared["counts"], compared["differences"]
    lines = []
    for side in (a, b):
        changed = side["tree_digest_start"] != side["tree_digest_end"]
        lines.append(
            f"{side['tree']}: {side['transformers_file']} (wrap={side['wrap']}, {len(side['models'])} model types, "
            f"{side['total_seconds']} s)" + (" WARNING: the tree changed on disk during the run" if changed else "")
        )
    lines.append(
        f"identical runs: {counts['identical']} of {counts['ran_on_both']} that ran on both sides; the same error on both: "
        f"{counts['same_error']} runs; not built on either: {counts['not_built']} model types; "
        f"differences: {len(differences)}"
    )
    lines += [f"  DIFFERENT {model} [{cache}]: {detail}" for model, cache, detail in differences]
    for name, side in (("A", a), ("B", b)):
        if side["wrap"]:
            inits = initializations(side)
            lines.append(
                f"{name} ({side['tree']}): static cache initialized before the prefill in {len(inits['early'])} "
                f"model types; layers initialized again in {sorted(inits['reinitialized'].items())}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a, b = (torch.load(path, weights_only=False) for path in argv)
    print(report(a, b))
    return 1 if compare(a, b)["differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
