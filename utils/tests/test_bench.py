"""Tests of the benchmark's tooling: the quick mode end to end and its JSON schema, never its timings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench.__main__ import main, parse_args, side_command
from bench.report import DECODE_TIMES, SIDES
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
    for section in ("1. decode loop", "2. over the decode steps", "3. compile cost", "4. tracing", "5. GPT2"):
        assert section in stdout
    assert (out / "decode.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_mode_json_schema(quick_run):
    _, out = quick_run
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["schema_version"] == 1
    assert results["quick"] is True and results["device"] == "cpu" and results["compile_mode"] == "default"
    assert results["reps"] == 1 and results["order"] == ["upstream", "fork"]
    assert results["plot"] == "decode.png"
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

    # 1 and 3: timings are numbers, ratios next to them
    assert set(results["decode"]) == {"gpt2"}
    decode = results["decode"]["gpt2"]
    assert set(decode) == {*SIDES, "ratio"}
    for side in SIDES:
        for key in DECODE_TIMES:
            assert isinstance(decode[side][key], NUMBER), (side, key)
        assert decode[side]["step_ms"] and all(isinstance(v, NUMBER) for v in decode[side]["step_ms"])
        for key in ("forward_calls", "decode_mask_shapes", "decode_mask_addresses"):
            assert isinstance(decode[side][key], int)
        assert decode[side]["cudagraph_recordings"] is None
        cost = results["compile_cost"]["gpt2"][side]
        assert isinstance(cost["first_generate_s"], float) and isinstance(cost["graphs"], int)
    assert set(decode["ratio"]) == set(DECODE_TIMES)

    # 2: per configuration a status, and counts when it ran
    configs = results["recompiles"]["gpt2"]
    assert set(configs) == {"static_cache", "dynamic_cache", "dynamic_cache_static_mask"}
    for config, sides in configs.items():
        for side in SIDES:
            entry = sides[side]
            if config == "dynamic_cache_static_mask" and not trees[side]["static_attention_mask_available"]:
                assert entry == {"status": "n/a"}
                continue
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
    assert parse_args([]).device == "cpu" and parse_args([]).reps == 3


def test_device_cuda_without_cuda_fails_clearly(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: the option is exercised by `make bench BENCH_ARGS='--device cuda'`")
    assert main(["--device", "cuda", "--out", str(tmp_path / "out")]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_unknown_scenario_is_refused():
    with pytest.raises(SystemExit):
        parse_args(["--only", "decode,nope"])


def test_pristine_tree_is_extracted_once():
    tree = pristine_tree()
    marker = tree / ".complete"
    before = marker.stat().st_mtime_ns
    assert pristine_tree() == tree and marker.stat().st_mtime_ns == before
    assert (tree / "src" / "transformers" / "__init__.py").is_file()
