"""The model-matrix oracle: it runs both trees and compares them exactly, and its comparison sees a difference."""

import copy
import os
import subprocess
import sys

import torch
from forktool.common import ROOT
from oracle.compare import compare, report


def _side(tree: str, wrap: bool = False) -> dict:
    """Results of two model types as `oracle.matrix` saves them: one that ran, one that raised in its static run."""
    ran = {"sequences": torch.tensor([[5, 6, 7]]), "scores": torch.tensor([[[0.5, -1.0]]])}
    raised = {"error_type": "ValueError", "error": "no static cache"}
    models = {
        "llama": {"weights": "w1", "static": dict(ran, early=wrap, reinitialized=0), "dynamic": dict(ran)},
        "mamba": {"weights": "w2", "static": dict(raised), "dynamic": dict(ran)},
    }
    digest = {"tree_digest_start": "d", "tree_digest_end": "d", "total_seconds": 1.0}
    return {"tree": tree, "transformers_file": f"/{tree}/__init__.py", "wrap": wrap, "models": models, **digest}


def test_compare_counts_identical_runs_and_shared_errors():
    compared = compare(_side("upstream"), _side("fork"))
    assert compared == {
        "counts": {"ran_on_both": 3, "identical": 3, "same_error": 1, "not_built": 0},
        "differences": [],
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
    initializes the static caches of the attention models before the prefill, and none again."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "utils")}
    command = [sys.executable, "-m", "oracle", "--only", "gpt2,falcon,mamba", "--out", str(tmp_path)]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    text = (tmp_path / "report.txt").read_text(encoding="utf-8")
    assert text.count("identical runs: 6 of 6 that ran on both sides") == 2, text
    assert (
        "B (fork): static cache initialized before the prefill in 2 model types; layers initialized again in []"
        in text
    )
    assert "A (upstream): static cache initialized before the prefill in 0 model types" in text
