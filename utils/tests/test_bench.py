"""Tests of the benchmark's tooling: the quick mode end to end and its JSON schema, never its timings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench.__main__ import main, parse_args, side_command
from bench.report import COMPILE_TIMES, DECODE_TIMES, SIDES, aggregate, table, with_min
from bench.trees import pristine_tree


REPO = Path(__file__).resolve().parents[2]
NUMBER = (int, float)


def _inside(file: str, folder: Path) -> bool:
    return Path(file).resolve().is_relative_to(folder.resolve())


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One `python -m bench --quick` into a temporary folder: (its stdout, the folder)."""
    out = tmp_path_factory.mktemp("bench") / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO / "utils"))
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout, out


def test_quick_mode_writes_table_json_and_plot(quick_run):
    stdout, out = quick_run
    last_line = stdout.strip().splitlines()[-1]
    assert last_line.startswith("bench: wrote ") and str(out) in last_line
    sections = (
        "1. decode loop",
        "2. over the decode steps",
        "3. compile cost",
        "4. tracing",
        "5. GPT2",
        "6. consecutive",
    )
    for section in sections:
        assert section in stdout
    assert (out / "decode.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_mode_json_schema(quick_run):
    _, out = quick_run
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["schema_version"] == 2
    assert results["quick"] is True and results["device"] == "cpu" and results["compile_mode"] == "default"
    assert results["reps"] == 1 and results["order"] == ["upstream", "fork"]
    assert results["plot"] == "decode.png"
    assert results["warnings"] == []  # one run per tree: no spread to warn about
    assert isinstance(results["wall_s"], float)

    # both trees, each proven by the file it imported
    trees = results["trees"]
    assert set(trees) == set(SIDES)
    assert _inside(trees["upstream"]["transformers_file"], REPO / ".bench")
    assert _inside(trees["upstream"]["transformers_file"], Path(trees["upstream"]["src"]) / "transformers")
    assert _inside(trees["fork"]["transformers_file"], REPO / "src" / "transformers")
    assert not _inside(trees["fork"]["transformers_file"], REPO / ".bench")
    assert trees["upstream"]["static_attention_mask_available"] is False
    assert [run["side"] for run in results["runs"]] == ["upstream", "fork"]
    for run in results["runs"]:
        assert isinstance(run["wall_s"], float)
        assert run["transformers_file"] == trees[run["side"]]["transformers_file"]
        raw = json.loads((out / run["raw"]).read_text(encoding="utf-8"))
        assert raw["side"] == run["side"] and raw["transformers_file"] == run["transformers_file"]

    # 1 and 3: timings (medians and minimums over the runs) are numbers, both ratios next to them
    assert set(results["decode"]) == {"gpt2"}
    decode = results["decode"]["gpt2"]
    assert set(decode) == {*SIDES, "ratio"}
    for side in SIDES:
        assert decode[side]["status"] == "ok", decode[side]
        for key in with_min(DECODE_TIMES):
            assert isinstance(decode[side][key], NUMBER), (side, key)
        assert decode[side]["step_ms"] and all(isinstance(v, NUMBER) for v in decode[side]["step_ms"])
        for key in ("forward_calls", "decode_mask_shapes", "decode_mask_addresses"):
            assert isinstance(decode[side][key], int)
        assert decode[side]["cudagraph_recordings"] is None
        cost = results["compile_cost"]["gpt2"][side]
        assert cost["status"] == "ok" and isinstance(cost["graphs"], int)
        for key in with_min(COMPILE_TIMES):
            assert isinstance(cost[key], float), (side, key)
    assert set(decode["ratio"]) == set(with_min(DECODE_TIMES))
    assert all(isinstance(v, NUMBER) for v in decode["ratio"].values())
    assert set(results["compile_cost"]["gpt2"]["ratio"]) == set(with_min(COMPILE_TIMES))

    # 6: consecutive calls, per call a time (3 with --quick); CUDA-graph recordings and generate's own compile on CUDA
    assert set(results["calls"]) == {"gpt2"}
    for side in SIDES:
        entry = results["calls"]["gpt2"][side]
        assert entry["status"] == "ok", entry
        for key in ("call_ms", "call_ms_min"):
            assert len(entry[key]) == 3 and all(isinstance(v, float) for v in entry[key]), (side, key)
        assert entry["cudagraph_recordings"] is None and entry["generate_compile"] is None

    # 2: per configuration a status, and counts when it ran
    configs = results["recompiles"]["gpt2"]
    assert set(configs) == {"static_cache", "dynamic_cache"}
    for config, sides in configs.items():
        for side in SIDES:
            entry = sides[side]
            assert isinstance(entry["status"], str)
            if entry["status"] == "ok":
                for key in ("graphs", "graphs_after_first_decode_step", "recompiles", "graph_breaks"):
                    assert isinstance(entry[key], int), (config, side, key)
                assert isinstance(entry["recompile_reasons"], list)

    # 4 and 5: per tree "ok" (with measures) or the error's first line
    assert set(results["tracing"]) == {
        "compile_fullgraph_early_cache",
        "export_strict",
        "export_non_strict",
        "aot_export_joint_simple",
        "quantized_across_flushes",
    }
    for sides in results["tracing"].values():
        for side in SIDES:
            assert isinstance(sides[side]["status"], str) and "\n" not in sides[side]["status"]
    assert len(results["mask_matrix"]) == 6
    for kinds in results["mask_matrix"].values():
        assert set(kinds) == {"bool", "additive", "static_length"}
        for sides in kinds.values():
            for side in SIDES:
                value = sides[side]
                assert isinstance(value, (float, int)) or (isinstance(value, str) and "\n" not in value)


def test_device_cuda_is_forwarded_to_both_sides(tmp_path):
    args = parse_args(["--device", "cuda", "--quick", "--only", "decode"])
    assert args.device == "cuda" and args.reps == 1
    for side in SIDES:
        command, env = side_command(side, tmp_path / side / "src", tmp_path / f"{side}.json", args)
        assert command[command.index("--device") + 1] == "cuda"
        assert command[command.index("--only") + 1] == "decode"
        assert "--quick" in command
        assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / side / "src")
    assert parse_args([]).device == "cpu" and parse_args([]).reps == 5


def test_device_cuda_without_cuda_fails_clearly(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: the option is exercised by `make bench BENCH_ARGS='--device cuda'`")
    assert main(["--device", "cuda", "--out", str(tmp_path / "out")]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _synthetic_run(side: str, scale: float, status: str = "ok") -> dict:
    """One side's result as `bench.scenarios` writes it, decode, compile cost and calls only, timings times `scale`."""
    decode = dict.fromkeys(DECODE_TIMES, scale)
    decode.update(step_ms=[scale], forward_calls=9, decode_mask_shapes=1, decode_mask_addresses=1)
    decode.update(status="ok", cudagraph_recordings=None)
    cost = {"status": "ok", **dict.fromkeys(COMPILE_TIMES, scale), "graphs": 2}
    calls = {"status": "ok", "call_ms": [10 * scale, scale], "cudagraph_recordings": None, "generate_compile": None}
    failed = {"status": status}
    scenarios = {
        "decode": {"gpt2": decode if status == "ok" else failed},
        "compile_cost": {"gpt2": cost if status == "ok" else failed},
        "calls": {"gpt2": calls if status == "ok" else {**failed, "generate_compile": None}},
    }
    return {
        "side": side,
        "transformers_file": f"/{side}/transformers/__init__.py",
        "transformers_version": "0",
        "static_attention_mask_available": False,
        "scenarios": scenarios,
    }


def test_aggregate_reports_medians_minimums_spread_and_failures():
    meta = {"device": "cpu", "compile_mode": "default", "reps": 3, "order": list(SIDES) * 3}
    meta["tree_src"] = {side: f"/{side}" for side in SIDES}
    runs = [
        run for scale in (1.0, 1.1, 2.0) for run in (_synthetic_run("upstream", scale), _synthetic_run("fork", 1.0))
    ]
    results = aggregate(runs, meta)
    upstream, fork = results["decode"]["gpt2"]["upstream"], results["decode"]["gpt2"]["fork"]
    assert (upstream["ms_per_token"], upstream["ms_per_token_min"], fork["ms_per_token_min"]) == (1.1, 1.0, 1.0)
    assert results["calls"]["gpt2"]["upstream"]["call_ms"] == [11.0, 1.1]
    assert results["calls"]["gpt2"]["upstream"]["call_ms_min"] == [10.0, 1.0]
    warnings = results["warnings"]
    assert "upstream decode.gpt2.ms_per_token: runs spread by 100% (min 1, max 2)" in warnings
    assert "upstream calls.gpt2.call_ms[0]: runs spread by 100% (min 10, max 20)" in warnings
    assert not any(warning.startswith("fork") for warning in warnings)
    assert "WARNING: upstream compile_cost.gpt2.first_generate_s: runs spread" in table(results)

    runs[1] = _synthetic_run("fork", 1.0, status="RuntimeError: boom")
    results = aggregate(runs, meta)
    assert results["decode"]["gpt2"]["fork"] == {"status": "RuntimeError: boom"}
    assert results["compile_cost"]["gpt2"]["fork"] == {"status": "RuntimeError: boom"}
    assert results["calls"]["gpt2"]["fork"] == {"status": "RuntimeError: boom", "generate_compile": None}
    assert set(results["decode"]["gpt2"]["ratio"].values()) == {None}
    assert "RuntimeError: boom" in table(results)


def test_unknown_scenario_is_refused():
    with pytest.raises(SystemExit):
        parse_args(["--only", "decode,nope"])


def test_pristine_tree_is_extracted_once():
    tree = pristine_tree()
    marker = tree / ".complete"
    before = marker.stat().st_mtime_ns
    assert pristine_tree() == tree and marker.stat().st_mtime_ns == before
    assert (tree / "src" / "transformers" / "__init__.py").is_file()
