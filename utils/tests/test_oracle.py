"""The oracle: it runs both trees and compares them (the model matrix exactly, the case families by their rule), and
its comparisons see a difference."""

import copy
import os
import subprocess
import sys

import torch
from bench.trees import pristine_tree
from forktool.common import ROOT
from oracle import FAMILIES
from oracle.compare import (
    compare,
    compare_families,
    compare_sliding,
    family_differences,
    judge,
    report,
    report_families,
    sliding_differences,
)


def _side(tree: str, wrap: bool = False) -> dict:
    """Results of two model types as `oracle.matrix` saves them: one that ran, one that raised in its static run."""
    ran = {"sequences": torch.tensor([[5, 6, 7]]), "scores": torch.tensor([[[0.5, -1.0]]])}
    raised = {"error_type": "ValueError", "error": "no static cache"}
    models = {
        "llama": {
            "weights": "w1",
            "static": dict(ran, early=False, reinitialized=0),
            "dynamic": dict(ran),
            "passed": dict(ran, early=wrap, reinitialized=0),
        },
        "mamba": {"weights": "w2", "static": dict(raised), "dynamic": dict(ran), "passed": dict(raised)},
    }
    digest = {"tree_digest_start": "d", "tree_digest_end": "d", "total_seconds": 1.0}
    return {"tree": tree, "transformers_file": f"/{tree}/__init__.py", "wrap": wrap, "models": models, **digest}


def test_compare_counts_identical_runs_and_shared_errors():
    compared = compare(_side("upstream"), _side("fork"))
    assert compared == {
        "counts": {"ran_on_both": 4, "identical": 4, "same_error": 2, "not_built": 0},
        "differences": [],
        "accepted": [],
    }


def test_compare_reports_every_kind_of_difference():
    upstream = _side("upstream")
    fork = copy.deepcopy(upstream)
    fork["tree"], fork["transformers_file"] = "fork", "/fork/__init__.py"
    fork["models"]["llama"]["static"]["scores"] = torch.tensor([[[0.5, -1.0 + 1e-6]]])
    fork["models"]["llama"]["dynamic"]["sequences"] = torch.tensor([[5, 6, 8]])
    fork["models"]["mamba"]["static"] = {"sequences": torch.tensor([[1]]), "scores": torch.tensor([[[0.0]]])}
    del fork["models"]["mamba"]["weights"]
    differences = {(model, cache): detail for model, cache, detail in compare(upstream, fork)["differences"]}
    assert set(differences) == {("llama", "static"), ("llama", "dynamic"), ("mamba", "static"), ("mamba", "weights")}
    assert differences["llama", "static"].startswith("max |d score| 1.01")
    assert differences["llama", "dynamic"].startswith("sequences differ at 1 positions")
    assert differences["mamba", "static"] == "only A raised ValueError: no static cache"
    assert "differences: 4" in report(upstream, fork)


def test_static_runs_differ_from_pristine_by_any_score():
    """No tolerance and no acceptance: the fork's static runs must give pristine's tokens and scores exactly, past
    a window too."""
    upstream = _side("upstream")
    fork = copy.deepcopy(upstream)
    fork["tree"], fork["transformers_file"] = "fork", "/fork/__init__.py"
    llama = fork["models"]["llama"]
    llama["static"]["scores"] = torch.tensor([[[0.5, -1.0 + 5e-6]]])
    llama["static"]["window_passed"] = True
    llama["passed"]["scores"] = torch.tensor([[[0.5, -1.0 + 5e-6]]])
    compared = compare(upstream, fork)
    assert compared["accepted"] == []
    assert [(model, cache) for model, cache, _ in compared["differences"]] == [
        ("llama", "static"),
        ("llama", "passed"),
    ]
    # Even where the fork's run equals pristine's dynamic cache
    upstream["models"]["llama"]["static"]["scores"] = torch.tensor([[[0.5, -0.9]]])
    llama["static"] = dict(upstream["models"]["llama"]["dynamic"])
    assert ("llama", "static") in {(model, cache) for model, cache, _ in compare(upstream, fork)["differences"]}


def _sliding_side(tree, static_scores=-1.0, graphs=(2, 2), compiled_token=7, static_error=None):
    run = {"sequences": torch.tensor([[5, 6, 7]]), "scores": torch.tensor([[[0.5, -1.0]]])}
    static = (
        {"error_type": "RuntimeError", "error": static_error}
        if static_error
        else {"sequences": run["sequences"], "scores": torch.tensor([[[0.5, static_scores]]])}
    )
    compiled_run = {"sequences": torch.tensor([[5, 6, compiled_token]]), "scores": run["scores"], "mask_tensors": {}}
    entry = {
        "dynamic": run,
        "static": static,
        "static_shapes": {"graphs": list(graphs), "runs": [compiled_run, compiled_run]},
        "default": {"graphs": [2], "symint_inputs": [0, 0], "runs": [compiled_run]},
    }
    return {"tree": tree, "transformers_file": f"/{tree}/__init__.py", "models": {"m": entry}, "total_seconds": 1}


def test_sliding_families_verdicts():
    upstream = _sliding_side("upstream", graphs=(8, 8))
    cases = {
        "equal": _sliding_side("fork"),
        "different": _sliding_side("fork", static_scores=-1.0 + 5e-6),
    }
    for verdict, fork in cases.items():
        assert compare_sliding(upstream, fork)["m"]["verdict"] == verdict
    # The fork's compiled runs give other tokens than its eager run, or it compiles more graphs: a difference
    assert sliding_differences(upstream, _sliding_side("fork", compiled_token=8)) == 1
    assert sliding_differences(_sliding_side("upstream"), _sliding_side("fork", graphs=(2, 3))) == 1
    # The same error on both sides
    errors = [_sliding_side(tree, static_error="size mismatch") for tree in ("upstream", "fork")]
    assert compare_sliding(*errors)["m"]["verdict"] == "equal"


def test_compare_sees_errors_trees_and_nans():
    upstream, fork = _side("upstream"), _side("fork")
    for side in (upstream, fork):
        side["models"]["llama"]["static"]["scores"] = torch.tensor([[[float("nan"), -1.0]]])  # NaN on both: equal
    fork["models"]["mamba"]["static"]["error"] = "no static cache for this model"  # same type, other message
    fork["tree_digest_end"] = "changed"
    differences = {(model, cache) for model, cache, _ in compare(upstream, fork)["differences"]}
    assert differences == {("mamba", "static"), ("-", "trees")}
    same_tree = compare(upstream, {**upstream, "tree": "fork"})["differences"]
    assert same_tree == [("-", "trees", "both sides imported /upstream/__init__.py")]


def test_both_trees_on_three_model_types(tmp_path):
    """The driver end to end: pristine and the fork give the same tokens and scores; with a wrapped forward, the fork
    initializes the static caches passed in to the attention models before the prefill, and none again, and leaves
    the ones `generate` makes to their first update, as upstream does."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "utils")}
    command = [
        sys.executable,
        "-m",
        "oracle",
        "--only",
        "gpt2,falcon,mamba",
        "--families",
        "none",
        "--out",
        str(tmp_path),
    ]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    text = (tmp_path / "report.txt").read_text(encoding="utf-8")
    # mamba, which has no attention layer, runs with the `StaticCache` passed in too (since 5.24.0)
    assert text.count("identical runs: 9 of 9 that ran on both sides; the same error on both: 0 runs") == 2, text
    # Neither tree allocates a static cache before the prefill: `generate` does it only before a chunked prefill
    for side in ("A (upstream)", "B (fork)"):
        for cache in ("static", "passed"):
            assert f"{side}, {cache}: static cache initialized before the prefill in 0 model types" in text, text


LOGITS = torch.tensor([[0.25, -1.5], [2.0, 0.5]])
RIGHT = {"each sequence alone": LOGITS + 1e-6}  # a reference, within `REFERENCE_ATOL` of LOGITS


def _run(value=None, error_type=None, references=None) -> dict:
    run = {"value": value} if error_type is None else {"error_type": error_type, "error": f"a {error_type}"}
    return {**run, "references": references or {}}


def test_judge_equal():
    assert judge(_run(LOGITS.clone()), _run(LOGITS.clone())) == ("equal", "")
    assert (
        judge(_run({"calls": 10, "kept": [torch.ones(2)]}), _run({"calls": 10, "kept": [torch.ones(2)]}))[0] == "equal"
    )
    same_type = judge(_run(error_type="IndexError"), {"error_type": "IndexError", "error": "another message"})
    assert same_type == ("equal", "")
    assert judge(_run(torch.tensor([float("nan")])), _run(torch.tensor([float("nan")])))[0] == "equal"


def test_judge_accepts_a_value_error_where_pristine_raised_or_was_wrong_and_the_reference():
    verdict, why = judge(_run(error_type="IndexError"), _run(error_type="ValueError"))
    assert (verdict, why) == ("accepted", "the fork raises ValueError where pristine raised IndexError")
    verdict, why = judge(_run(LOGITS + 0.4, references=RIGHT), _run(error_type="ValueError", references=RIGHT))
    assert verdict == "accepted" and why.startswith("the fork raises ValueError where pristine was wrong"), why
    verdict, why = judge(_run(LOGITS + 0.4, references=RIGHT), _run(LOGITS, references=RIGHT))
    assert verdict == "accepted" and why.startswith("the fork gives the reference (each sequence alone)"), why
    verdict, why = judge(_run(error_type="RuntimeError", references=RIGHT), _run(LOGITS, references=RIGHT))
    assert verdict == "accepted" and why.endswith("where pristine raised RuntimeError"), why
    # the references are pristine's: the fork's own do not count
    verdict, _ = judge(_run(error_type="RuntimeError"), _run(LOGITS, references=RIGHT))
    assert verdict == "different"


def test_judge_reports_differences():
    cases = {
        "another value": (_run(LOGITS), _run(LOGITS + 1e-7)),
        "another count": (_run({"calls": 10}), _run({"calls": 2})),
        "another shape": (_run(LOGITS), _run(LOGITS[:1])),
        "a value where pristine raised": (_run(error_type="IndexError"), _run(LOGITS)),
        "off the reference where pristine raised": (
            _run(error_type="IndexError", references=RIGHT),
            _run(LOGITS + 0.415, references=RIGHT),
        ),
        "an error where pristine gave a value": (_run(LOGITS), _run(error_type="RuntimeError")),
        "a ValueError where pristine was right": (_run(LOGITS, references=RIGHT), _run(error_type="ValueError")),
        "a ValueError without a reference": (_run(LOGITS), _run(error_type="ValueError")),
        "another error": (_run(error_type="ValueError"), _run(error_type="RuntimeError")),
    }
    for name, (a, b) in cases.items():
        verdict, detail = judge(a, b)
        assert verdict == "different" and detail, name
    assert judge(*cases["another count"]) == ("different", "calls: 10 vs 2")
    assert "max |d| 4.15" in judge(*cases["off the reference where pristine raised"])[1]


def _families_side(tree: str, cases: dict) -> dict:
    digest = {"tree_digest_start": "d", "tree_digest_end": "d"}
    return {"tree": tree, "transformers_file": f"/{tree}/__init__.py", "families": cases, **digest} | {
        "notes": {family: [] for family in cases},
        "seconds": dict.fromkeys(cases, 1.0),
    }


def test_compare_families_counts_and_lists_per_family():
    pristine = _families_side(
        "upstream",
        {
            "packed_masks": {"equal": _run(LOGITS), "accepted": _run(error_type="IndexError")},
            "hooks": {"different": _run({"calls": 10}), "pristine only": _run({"calls": 1})},
        },
    )
    fork = _families_side(
        "fork",
        {
            "packed_masks": {"equal": _run(LOGITS), "accepted": _run(error_type="ValueError")},
            "hooks": {"different": _run({"calls": 2}), "fork only": _run({"calls": 1})},
        },
    )
    compared = compare_families(pristine, fork)
    assert compared["packed_masks"] == {
        "cases": 2,
        "equal": 1,
        "accepted": [("accepted", "the fork raises ValueError where pristine raised IndexError")],
        "differences": [],
    }
    assert compared["hooks"]["differences"] == [
        ("different", "calls: 10 vs 2"),
        ("pristine only", "only pristine has it"),
        ("fork only", "only the fork has it"),
    ]
    text = report_families(pristine, fork)
    assert "packed_masks: 2 cases, 1 equal, 1 accepted, 0 differences" in text
    assert "hooks: 3 cases, 0 equal, 0 accepted, 3 differences" in text
    assert family_differences(pristine, fork) == 3
    assert family_differences(pristine, {**pristine, "tree": "fork"}) == 1  # both sides imported the same file


def test_each_family_on_one_model(tmp_path):
    """The driver end to end on the families alone, for GPT2, with pristine on both sides (the second through a link,
    so that the sides import different paths): every family runs cases, and none differs."""
    link = tmp_path / "pristine-link"
    link.mkdir()
    (link / "transformers").symlink_to(pristine_tree() / "src" / "transformers")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "utils")}
    command = [
        *(sys.executable, "-m", "oracle", "--no-matrix", "--family-models", "gpt2"),
        *("--fork-tree", str(link), "--out", str(tmp_path / "out")),
    ]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    text = (tmp_path / "out" / "report.txt").read_text(encoding="utf-8")
    for family in FAMILIES:
        line = next(line for line in text.splitlines() if line.startswith(f"{family}: "))
        assert line.endswith(" 0 accepted, 0 differences") and not line.startswith(f"{family}: 0 cases"), line
    results = torch.load(tmp_path / "out" / "upstream-families.pt", weights_only=False)["families"]
    assert {name.split("/")[0] for name in results["packed_masks"]} == {"gpt2"}
    assert any("value" in run for family in FAMILIES for run in results[family].values())
    assert all("value" in run for run in results["hooks"].values()), results["hooks"]
    assert all("value" in run for run in results["memory"].values()), results["memory"]
