"""Compares two sides' results of `oracle.matrix`: per model and cache, identical (the same sequences, exactly equal
scores), the same error on both sides, or a difference; and of `oracle.families`: per case equal, accepted or a
difference (see `judge`). `python -m oracle.compare A.pt B.pt` prints the report of either."""

from __future__ import annotations

import sys

import torch


REFERENCE_ATOL = 1e-4  # a run against its reference, computed another way (never one side against the other)


CACHES = ("static", "dynamic", "passed")  # see `oracle.matrix`


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
    """Counts, the list of differences and the accepted ones between the results `a` and `b` of two sides."""
    counts = {"ran_on_both": 0, "identical": 0, "same_error": 0, "not_built": 0}
    differences, accepted = [], []
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
    return {"counts": counts, "differences": differences, "accepted": accepted}


def initializations(results: dict) -> dict:
    """With `--wrap`, per static cache run (`static`, `passed`): the models whose cache was initialized before the
    first forward, and those with layers initialized again (model -> count)."""
    inits = {}
    for cache in (cache for cache in CACHES if cache != "dynamic"):
        runs = {model: entry.get(cache, {}) for model, entry in results["models"].items()}
        inits[cache] = {
            "early": [model for model, run in runs.items() if run.get("early")],
            "reinitialized": {model: run["reinitialized"] for model, run in runs.items() if run.get("reinitialized")},
        }
    return inits


def report(a: dict, b: dict) -> str:
    compared = compare(a, b)
    counts, differences, accepted = compared["counts"], compared["differences"], compared["accepted"]
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
        f"accepted: {len(accepted)}; differences: {len(differences)}"
    )
    lines += [f"  DIFFERENT {model} [{cache}]: {detail}" for model, cache, detail in differences]
    lines += [f"  accepted {model} [{cache}]: {detail}" for model, cache, detail in accepted]
    for name, side in (("A", a), ("B", b)):
        if side["wrap"]:
            for cache, inits in initializations(side).items():
                lines.append(
                    f"{name} ({side['tree']}), {cache}: static cache initialized before the prefill in "
                    f"{len(inits['early'])} model types; layers initialized again in "
                    f"{sorted(inits['reinitialized'].items())}"
                )
    return "\n".join(lines)


# --- the sliding window and chunked families past their window (`oracle.sliding`) ---


def _outcome_of(run: dict) -> str:
    return "ran" if "sequences" in run else f"{run.get('error_type')}: {run.get('error', '')[:120]}"


def compare_sliding(a: dict, b: dict) -> dict:
    """Per family of the results `a` (pristine) and `b` (the fork) of `oracle.sliding`: a verdict (`equal`,
    `accepted` or `different`) with its detail, and the compiled graphs of each side.

    The eager static run decides, as in the matrix: equal when both give exactly the same (tokens and scores), or
    raise the same error. The fork's compiled runs must then give its eager run's tokens, and never compile more
    graphs than pristine's."""
    compared = {}
    for model in dict.fromkeys([*a["models"], *b["models"]]):
        entry_a, entry_b = a["models"].get(model, {}), b["models"].get(model, {})
        graphs = {
            side: {name: entry.get(name, {}).get("graphs") for name in ("static_shapes", "default")}
            | {"symint_inputs": entry.get("default", {}).get("symint_inputs")}
            | {"mask_tensors": (entry.get("static_shapes", {}).get("runs") or [{}])[0].get("mask_tensors")}
            for side, entry in (("upstream", entry_a), ("fork", entry_b))
        }
        verdict, detail = "equal", ""
        if "build" in entry_a or "build" in entry_b or not entry_a or not entry_b:
            same = entry_a.get("build", {}).get("error") == entry_b.get("build", {}).get("error")
            verdict, detail = ("equal", "not built on either") if same else ("different", "built on one side only")
        elif "sequences" not in entry_a["static"] or "sequences" not in entry_b["static"]:
            same = _outcome_of(entry_a["static"]) == _outcome_of(entry_b["static"])
            verdict = "equal" if same else "different"
            detail = f"{_outcome_of(entry_a['static'])} | {_outcome_of(entry_b['static'])}"
        elif (difference := _run_difference(entry_a["static"], entry_b["static"])) is not None:
            verdict, detail = "different", difference
        if verdict != "different" and "sequences" in entry_b.get("static", {}):
            for name in ("static_shapes", "default"):
                runs = entry_b.get(name, {}).get("runs", [])
                if not runs or any(not torch.equal(run["sequences"], entry_b["static"]["sequences"]) for run in runs):
                    verdict, detail = "different", f"the fork's compiled runs ({name}) give other tokens"
            fork, upstream = graphs["fork"]["static_shapes"], graphs["upstream"]["static_shapes"]
            if fork is None or (upstream is not None and fork[-1] > upstream[-1]):
                verdict, detail = "different", f"the fork compiles more graphs: {upstream} -> {fork}"
        compared[model] = {"verdict": verdict, "detail": detail, "graphs": graphs}
    return compared


def report_sliding(a: dict, b: dict) -> str:
    compared = compare_sliding(a, b)
    verdicts = [entry["verdict"] for entry in compared.values()]
    lines = [
        f"{side['tree']}: {side['transformers_file']} ({len(side['models'])} model types, {side['total_seconds']} s)"
        for side in (a, b)
    ]
    lines.append(
        f"{len(compared)} families: {verdicts.count('equal')} equal, {verdicts.count('accepted')} accepted, "
        f"{verdicts.count('different')} differences. Per family, pristine -> the fork: graphs compiled by each "
        "call (`dynamic=False`, two calls), SymInt inputs per graph (`dynamic=None`), mask tensors per layer type "
        "over the decoding steps"
    )
    for model, entry in compared.items():
        up, fork = entry["graphs"]["upstream"], entry["graphs"]["fork"]
        label = {"equal": "", "accepted": "accepted: ", "different": "DIFFERENT: "}[entry["verdict"]]
        lines.append(
            f"  {model}: graphs {up['static_shapes']} -> {fork['static_shapes']}; SymInt {up['symint_inputs']} -> "
            f"{fork['symint_inputs']}; masks {up['mask_tensors']} -> {fork['mask_tensors']}"
            + (f"; {label}{entry['detail']}" if entry["detail"] else "")
        )
    return "\n".join(lines)


def sliding_differences(a: dict, b: dict) -> int:
    return sum(entry["verdict"] == "different" for entry in compare_sliding(a, b).values())


# --- the case families (`oracle.families`) ---


def value_difference(a, b, atol: float = 0.0) -> str | None:
    """None when the values `a` and `b` are equal (tensors: the same shape and dtype, and equal within `atol`, NaN
    equal to NaN; anything else: `==`), else what differs."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}"
        if torch.allclose(a, b, rtol=0, atol=atol, equal_nan=True) if a.is_floating_point() else torch.equal(a, b):
            return None
        if not a.is_floating_point():
            return f"{int((a != b).sum())} of {a.numel()} elements differ"
        delta = torch.where(a == b, 0.0, (a - b).abs().nan_to_num(nan=float("inf")))
        return f"max |d| {delta.max().item():.3e}"
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"keys {sorted(a)} vs {sorted(b)}"
        details = [f"{key}: {d}" for key in a if (d := value_difference(a[key], b[key], atol)) is not None]
        return "; ".join(details) or None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{len(a)} vs {len(b)} items"
        details = [
            f"[{i}] {d}" for i, (x, y) in enumerate(zip(a, b)) if (d := value_difference(x, y, atol)) is not None
        ]
        return "; ".join(details) or None
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return f"{type(a).__name__} vs {type(b).__name__}"
    return None if type(a) is type(b) and a == b else f"{a!r} vs {b!r}"


def _outcome(run: dict) -> str:
    return f"{run['error_type']}: {run['error'][:200]}" if "error_type" in run else "a value"


def _matched(references: dict, value) -> str | None:
    """The name of the first reference that `value` equals within `REFERENCE_ATOL`, else None."""
    return next(
        (name for name, ref in references.items() if value_difference(ref, value, REFERENCE_ATOL) is None), None
    )


def _off(references: dict, value) -> str:
    return "; ".join(f"{name}: {value_difference(ref, value, REFERENCE_ATOL)}" for name, ref in references.items())


def judge(a: dict, b: dict) -> tuple[str, str]:
    """One case of a family, pristine's run `a` against the fork's run `b`: `("equal", "")`, `("accepted", why)` or
    `("different", what)`.

    Equal: the same value (tensors exactly equal) or an exception of the same type on both sides. Otherwise the fork's
    run is accepted only where it raises a `ValueError` and pristine raised too or was wrong against the references
    (pristine's, each what the case must give, computed another way in the same process; a value is right when it
    equals one of them within `REFERENCE_ATOL`), or where the fork gives a reference. Anything else is a difference.
    """
    references = {name: ref for name, ref in a.get("references", {}).items() if ref is not None}
    fork_gives = _matched(references, b["value"]) if "value" in b else None
    if "value" in a and "value" in b:
        if (d := value_difference(a["value"], b["value"])) is None:
            return "equal", ""
        if fork_gives is not None:
            return "accepted", f"the fork gives the reference ({fork_gives}) and differs from pristine by {d}"
        return "different", d + (
            f"; the fork against the references: {_off(references, b['value'])}" if references else ""
        )
    if "value" not in a and "value" not in b:
        if a["error_type"] == b["error_type"]:
            return "equal", ""
        if b["error_type"] == "ValueError":
            return "accepted", f"the fork raises ValueError where pristine raised {a['error_type']}"
        return "different", f"pristine raised {_outcome(a)} | the fork raised {_outcome(b)}"
    if "value" in a:  # only the fork raised
        if b["error_type"] == "ValueError" and references and _matched(references, a["value"]) is None:
            return "accepted", f"the fork raises ValueError where pristine was wrong ({_off(references, a['value'])})"
        return "different", f"pristine gave a value, the fork raised {_outcome(b)}"
    if fork_gives is not None:  # only pristine raised
        return "accepted", f"the fork gives the reference ({fork_gives}) where pristine raised {a['error_type']}"
    return "different", f"pristine raised {_outcome(a)}, the fork gave a value" + (
        f" (against the references: {_off(references, b['value'])})" if references else ""
    )


def compare_families(a: dict, b: dict) -> dict:
    """Per family of the results `a` (pristine) and `b` (the fork) of `oracle.families`: the number of cases, of equal
    ones, the accepted ones (case, why) and the differences (case, what)."""
    compared = {}
    for family in dict.fromkeys([*a["families"], *b["families"]]):
        cases_a, cases_b = a["families"].get(family, {}), b["families"].get(family, {})
        counts = {"cases": 0, "equal": 0, "accepted": [], "differences": []}
        for name in dict.fromkeys([*cases_a, *cases_b]):
            counts["cases"] += 1
            if name not in cases_a or name not in cases_b:
                counts["differences"].append((name, f"only {'the fork' if name in cases_b else 'pristine'} has it"))
                continue
            verdict, detail = judge(cases_a[name], cases_b[name])
            if verdict == "equal":
                counts["equal"] += 1
            else:
                counts["accepted" if verdict == "accepted" else "differences"].append((name, detail))
        compared[family] = counts
    return compared


def family_problems(a: dict, b: dict) -> list[str]:
    problems = (
        [] if a["transformers_file"] != b["transformers_file"] else [f"both sides imported {a['transformers_file']}"]
    )
    return problems + [
        f"{side['tree']}'s tree changed on disk during its run"
        for side in (a, b)
        if side["tree_digest_start"] != side["tree_digest_end"]
    ]


def report_families(a: dict, b: dict) -> str:
    lines = [
        f"{side['tree']}: {side['transformers_file']} ({sum(side['seconds'].values()):.1f} s: "
        + ", ".join(f"{family} {seconds} s" for family, seconds in side["seconds"].items())
        + ")"
        for side in (a, b)
    ]
    lines += [f"  PROBLEM {problem}" for problem in family_problems(a, b)]
    for family, counts in compare_families(a, b).items():
        lines.append(
            f"{family}: {counts['cases']} cases, {counts['equal']} equal, {len(counts['accepted'])} accepted, "
            f"{len(counts['differences'])} differences"
        )
        notes_a, notes_b = a["notes"].get(family, []), b["notes"].get(family, [])
        lines += [f"  note: {note}" for note in notes_a]
        lines += [f"  note ({b['tree']}): {note}" for note in notes_b if note not in notes_a]
        lines += [f"  DIFFERENT {name}: {detail}" for name, detail in counts["differences"]]
        lines += [f"  accepted {name}: {detail}" for name, detail in counts["accepted"]]
    return "\n".join(lines)


def family_differences(a: dict, b: dict) -> int:
    return len(family_problems(a, b)) + sum(len(c["differences"]) for c in compare_families(a, b).values())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a, b = (torch.load(path, weights_only=False) for path in argv)
    if "families" in a:
        print(report_families(a, b))
        return 1 if family_differences(a, b) else 0
    print(report(a, b))
    return 1 if compare(a, b)["differences"] else 0


if __name__ == "__main__":
    sys.exit(main())
