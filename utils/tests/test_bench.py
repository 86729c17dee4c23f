"""Tests of the benchmark's tooling: the quick mode end to end and its JSON schema, never its timings."""

import gc
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from bench import __main__ as bench_main
from bench import publish, report, trees
from bench.__main__ import main, parse_args, side_command
from bench.report import (
    COMPILE_TIMES,
    DECODE_TIMES,
    FLOOR_TIMES,
    SCHEMA_VERSION,
    SIDES,
    STALL_SHARE,
    aggregate,
    describe_stalls,
    stalled,
    stalls,
    table,
    with_min,
    with_spread,
)
from bench.scenarios import guarded
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
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout, out


def test_quick_mode_writes_table_json_and_plot(quick_run):
    stdout, out = quick_run
    last_line = stdout.strip().splitlines()[-1]
    assert last_line.startswith("bench: wrote ") and str(out) in last_line
    # numbered in the order they are printed
    sections = (
        "1. decode loop",
        "2. compile cost",
        "3. the compiled decoding step",
        "4. speculative decoding",
        "5. over the decode steps",
        "6. tracing",
        "7. GPT2",
        "8. consecutive",
        "9. the first generate of a new process",
    )
    positions = [stdout.index(f"\n{section}") for section in sections]
    assert positions == sorted(positions)
    # a line per scenario of each process as it runs, the goals after the tables, the warnings in the run's folder
    assert "bench:   decode gpt2 (" in stdout and "bench:   tracing (" in stdout
    assert stdout.index("The project's goals:") > positions[-1]
    if (out / "warnings.txt").exists():
        assert "warnings (" in stdout and "WARNING:" not in stdout
    # one run per tree cannot give a verdict, and its table says so
    assert "NO VERDICT" in stdout
    assert (out / "decode.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_mode_json_schema(quick_run):
    _, out = quick_run
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["schema_version"] == SCHEMA_VERSION
    assert results["quick"] is True and results["long"] is False
    assert results["device"] == "cpu" and results["compile_mode"] == "default" and results["threads"] == 1
    assert results["reps"] == 1 and results["rerun_budget"] == 0 and results["order"] == ["upstream", "fork"]
    assert results["plot"] == "decode.png"
    # one run per tree: no spread to warn about; a stall is said (--quick runs nothing again), and a median that
    # contradicts its floor
    said = ("runs stalled even after the reruns", "the median and the floor disagree")
    assert all(any(text in warning for text in said) for warning in results["warnings"]), results["warnings"]
    assert isinstance(results["wall_s"], float)
    load = results["environment"]["load_average"]
    assert isinstance(load["start"], float) and isinstance(load["end"], float)

    # both trees, each proven by the file it imported
    trees = results["trees"]
    assert set(trees) == set(SIDES)
    assert _inside(trees["upstream"]["transformers_file"], REPO / ".bench")
    assert _inside(trees["upstream"]["transformers_file"], Path(trees["upstream"]["src"]) / "transformers")
    assert _inside(trees["fork"]["transformers_file"], REPO / "src" / "transformers")
    assert not _inside(trees["fork"]["transformers_file"], REPO / ".bench")
    assert [run["side"] for run in results["runs"]] == ["upstream", "fork"]
    for run in results["runs"]:
        assert isinstance(run["wall_s"], float) and run["rerun"] is False and run["used"] is True
        # one description per stalled decoding configuration, each named as in results["decode"]
        stalled = run["stalled"].split("; ") if run["stalled"] else []
        assert all(entry.split(": ", 1)[0] in results["decode"] for entry in stalled), run["stalled"]
        assert run["transformers_file"] == trees[run["side"]]["transformers_file"]
        raw = json.loads((out / run["raw"]).read_text(encoding="utf-8"))
        assert raw["side"] == run["side"] and raw["transformers_file"] == run["transformers_file"]
        assert raw["torch_threads"] == 1 and raw["inductor_cache_cold"] is True

    # 1 and 3: timings (medians, minimums and maximums over the runs) are numbers, the floors and ratios next to them
    steps = {"gpt2 decoding_step", "gpt2 decoding_step eos", "gpt2 decoding_step sampling"}
    speculative = {f"llama speculative {method}" for method in ("none", "assistant", "prompt_lookup", "decoding_step")}
    assert set(results["decode"]) == {
        "gpt2", "gpt2 eos", "gpt2 sampling", "gpt2 compile_config", "gpt2 recipe", "gpt2 compile_config eos",
        "gpt2 compile_config sampling", "gpt2 handwritten", *steps, *speculative,
    }  # fmt: skip
    # speculative decoding: both trees but for the step, each with the greedy tokens, its counts and its floors; the
    # speculative summary has each method, and the decoding step's summary none of them
    assert set(results["speculative"]) == speculative
    for key in speculative:
        for side in SIDES if not key.endswith("decoding_step") else ("fork",):
            entry = results["decode"][key][side]
            assert entry["status"] == "ok" and entry["same_tokens"] is True and entry["new_tokens"] == 8, (key, side)
            assert isinstance(entry["ms_per_token_floor"], NUMBER) and isinstance(entry["graphs"], int), (key, side)
            assert results["speculative"][key][side]["ms_per_token"]["floor"] == entry["ms_per_token_floor"]
    # every candidate accepted: each verification gives 4 drafted tokens and one more, 8 tokens in 2 forwards
    assert results["decode"]["llama speculative assistant"]["fork"]["forward_calls"] == 2
    assert results["decode"]["llama speculative assistant"]["fork"]["draft_tokens"] == 4
    assert isinstance(results["speculative"]["llama speculative assistant"]["ratio"]["floor"], NUMBER)
    # the compiled decoding step: the fork's only, its calls cut at the prefill's forward and at each step
    for key in steps:
        entry = results["decode"][key]
        assert entry["upstream"]["status"].startswith("not in this tree"), entry["upstream"]
        assert entry["fork"]["status"] == "ok" and entry["fork"]["forward_calls"] == 8, entry["fork"]
        assert isinstance(entry["fork"]["host_ms_per_token_floor"], NUMBER), key
    assert set(results["decoding_step"]) == {"gpt2 greedy", "gpt2 eos", "gpt2 sampling"}
    for name, figures in results["decoding_step"].items():
        assert isinstance(figures["step_vs_pristine"]["floor"], NUMBER), name
    assert isinstance(results["decoding_step"]["gpt2 greedy"]["step_vs_handwritten"]["floor"], NUMBER)
    assert set(results["compile_cost"]) == {"gpt2"}  # the decoding configurations share the model's compile
    # the hand-written loop, the step's floor, in the fork only
    assert results["decode"]["gpt2 handwritten"]["upstream"]["status"].startswith("not in this tree")
    assert results["decode"]["gpt2 handwritten"]["fork"]["status"] == "ok"
    for config_name in ("eos", "sampling", "compile_config", "recipe", "compile_config eos"):
        entry = results["decode"][f"gpt2 {config_name}"]
        for side in SIDES:
            assert entry[side]["status"] == "ok" and entry[side]["forward_calls"] == 8, (config_name, entry[side])
            assert isinstance(entry[side]["host_ms_per_token_floor"], NUMBER), (config_name, side)
        assert isinstance(entry["ratio"]["host_ms_per_token_floor"], NUMBER)
    decode = results["decode"]["gpt2"]
    assert set(decode) == {*SIDES, "ratio"}
    for side in SIDES:
        assert decode[side]["status"] == "ok", decode[side]
        for key in (*with_spread(DECODE_TIMES), *(f"{key}_floor" for key in FLOOR_TIMES)):
            assert isinstance(decode[side][key], NUMBER), (side, key)
        assert decode[side]["ms_per_token_floor"] <= decode[side]["ms_per_token_min"]
        assert decode[side]["step_ms"] and all(isinstance(v, NUMBER) for v in decode[side]["step_ms"])
        for key in ("forward_calls", "decode_mask_shapes", "decode_mask_addresses", "runs", "reruns", "stalled_runs"):
            assert isinstance(decode[side][key], int), (side, key)
        assert decode[side]["forward_calls"] == 8  # --quick: 8 new tokens
        assert decode[side]["decode_mask_addresses_range"][0] <= decode[side]["decode_mask_addresses"]
        assert decode[side]["cudagraph_recordings"] is None
        cost = results["compile_cost"]["gpt2"][side]
        assert cost["status"] == "ok" and isinstance(cost["graphs"], int) and cost["runs"] == 1
        # a fresh inductor cache per tree: the code generated by the first call is counted
        assert isinstance(cost["generated_files"], int) and cost["generated_files"] > 0, (side, cost)
        assert isinstance(cost["generated_kb"], float) and cost["generated_kb"] > 0, (side, cost)
        for key in with_spread(COMPILE_TIMES):
            assert isinstance(cost[key], float), (side, key)
    assert set(decode["ratio"]) == {*with_min(DECODE_TIMES), *(f"{key}_floor" for key in FLOOR_TIMES)}
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
    assert set(configs) == {"static_cache", "static_cache_dynamic_none", "dynamic_cache"}
    for config, sides in configs.items():
        for side in SIDES:
            entry = sides[side]
            assert isinstance(entry["status"], str)
            if entry["status"] == "ok":
                for key in (
                    "graphs",
                    "graphs_after_first_decode_step",
                    "recompiles",
                    "graph_breaks",
                    "symint_inputs_of_decode_graphs",
                    "symint_values_of_decode_steps",
                ):
                    assert isinstance(entry[key], int), (config, side, key)
                assert isinstance(entry["recompile_reasons"], list)

    # 8: the first generate of new processes, pristine's CompileConfig() beside the fork's step (--quick), each kind
    # from its own process, each process proven by the tree it imported
    first_calls = results["first_call"]["models"]
    assert set(first_calls) == {"gpt2"}
    assert set(first_calls["gpt2"]) == {"compile_config", "decoding_step"}
    assert set(first_calls["gpt2"]["compile_config"]) == {"upstream"}
    assert set(first_calls["gpt2"]["decoding_step"]) == {"fork"}
    for path, side in (("compile_config", "upstream"), ("decoding_step", "fork")):
        figures = first_calls["gpt2"][path][side]
        for kind in ("cold", "warm", "primer_vec_isa_ok", "warm_vec_isa_ok"):
            for key in (kind, f"{kind}_cpu"):
                assert figures[key]["processes"] == 1 and isinstance(figures[key]["least"], float), (path, key)
            raw = json.loads((out / "raw" / f"first_call-{side}-gpt2-{path}-{kind}-1-1.json").read_text())
            assert _inside(raw["transformers_file"], Path(trees[side]["src"]) / "transformers"), (path, kind)
            assert raw["vec_isa_ok"] == kind.endswith("vec_isa_ok"), (path, kind)
            assert raw["step_ran"] is (True if path == "decoding_step" else None), (path, kind)

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


def _decode_entry(step: float, calls: int = 5, tokens: int = 6, stall_ms: float = 0.0, stalled_calls: int = 0) -> dict:
    """One run's decode entry of one model as `bench.scenarios` writes it: a clean call takes `step` ms per token,
    half of it in the forwards; the first `stalled_calls` calls have `stall_ms` more in each decode step (the
    process descheduled between two decode forwards)."""
    segments, per_call, steps = [], [], []
    gap = step * tokens / (2 * (tokens + 1))  # so that a clean call takes `step` ms per token
    for n in range(calls):
        extra = stall_ms if n < stalled_calls else 0.0
        forward = [step / 2] * tokens
        host = [gap] + [gap + (extra if i >= 2 else 0.0) for i in range(1, tokens)] + [gap]
        segments.append({"forward": forward, "host": host})
        per_call.append((sum(forward) + sum(host)) / tokens)
        steps.append([forward[i] + host[i + 1] for i in range(1, tokens - 1)])
    median = round(sorted(per_call)[len(per_call) // 2], 9)
    entry = dict.fromkeys(DECODE_TIMES, median)
    entry.update(host_ms_per_token=median / 2, forward_ms_per_token=median / 2, forward_alone_ms=step / 2)
    entry.update(forward_alone_fastest_ms=step / 2, step_ms=steps[0], step_cpu_ms=steps[0])
    entry.update(timed_ms_per_token=per_call, timed_step_ms=steps, timed_segments_ms=segments)
    entry.update(status="ok", forward_calls=tokens, decode_mask_shapes=1, decode_mask_addresses=1)
    entry.update(cudagraph_recordings=None)
    return entry


def _synthetic_run(
    side: str, scale: float, status: str = "ok", cold: bool = True, stall_ms: float = 0.0, stalled_calls: int = 0
) -> dict:
    """One side's result as `bench.scenarios` writes it, decode, compile cost and calls only, timings times `scale`."""
    decode = _decode_entry(scale, stall_ms=stall_ms, stalled_calls=stalled_calls)
    cost = {"status": "ok", **dict.fromkeys(COMPILE_TIMES, scale), "graphs": 2, "generated_files": 3}
    cost.update(generated_kb=10 * scale, cold_cache=cold)
    calls = {"status": "ok", "call_ms": [10 * scale, scale], "cudagraph_recordings": None, "generate_compile": None}
    failed = {"status": status}
    scenarios = {
        # a decoding configuration of the model beside its greedy one: its decode only (it shares the compile)
        "decode": {"gpt2": decode if status == "ok" else failed, "gpt2 eos": decode if status == "ok" else failed},
        "compile_cost": {"gpt2": cost if status == "ok" else failed},
        "calls": {"gpt2": calls if status == "ok" else {**failed, "generate_compile": None}},
    }
    return {
        "side": side,
        "transformers_file": f"/{side}/transformers/__init__.py",
        "transformers_version": "0",
        "scenarios": scenarios,
    }


def _meta(reps: int) -> dict:
    meta = {"device": "cpu", "compile_mode": "default", "reps": reps, "order": list(SIDES) * reps}
    meta["tree_src"] = {side: f"/{side}" for side in SIDES}
    return meta


def test_aggregate_reports_medians_spreads_floors_and_failures():
    runs = [
        run for scale in (1.0, 1.1, 2.0) for run in (_synthetic_run("upstream", scale), _synthetic_run("fork", 1.0))
    ]
    results = aggregate(runs, _meta(3))
    upstream, fork = results["decode"]["gpt2"]["upstream"], results["decode"]["gpt2"]["fork"]
    assert (upstream["ms_per_token"], upstream["ms_per_token_min"], upstream["ms_per_token_max"]) == (1.1, 1.0, 2.0)
    assert fork["ms_per_token_min"] == 1.0 and upstream["runs"] == fork["runs"] == 3
    # the floors: every segment at its fastest over the calls of all runs
    assert upstream["ms_per_token_floor"] == pytest.approx(1.0)
    assert upstream["host_ms_per_token_floor"] == pytest.approx(upstream["forward_ms_per_token_floor"]) == 0.5
    assert upstream["forward_alone_ms_floor"] == 0.5
    assert results["decode"]["gpt2"]["ratio"]["ms_per_token_floor"] == pytest.approx(1.0)
    assert results["calls"]["gpt2"]["upstream"]["call_ms"] == [11.0, 1.1]
    assert results["calls"]["gpt2"]["upstream"]["call_ms_min"] == [10.0, 1.0]
    warnings = results["warnings"]
    # one warning per tree and scenario, naming each timing whose runs spread
    assert any(
        w.startswith("upstream decode.gpt2: runs spread by more than 25%: ms_per_token 100% (1-2), ") for w in warnings
    )
    assert (
        "upstream calls.gpt2: runs spread by more than 25%: call_ms[0] 100% (10-20), call_ms[1] 100% (1-2)" in warnings
    )
    assert any(w.startswith("upstream decode.gpt2 eos: runs spread by more than 25%: ms_per_token ") for w in warnings)
    assert not any(warning.startswith("fork") for warning in warnings) and len(warnings) == 4
    assert "gpt2 eos" not in results["compile_cost"]  # it shares the model's compile
    text = table(results)
    assert any(
        w.startswith("upstream compile_cost.gpt2: runs spread by more than 25%: first_generate_s 100% (1-2)")
        for w in warnings
    )
    # the table sums the warnings up (the driver writes the list into the run's warnings.txt)
    assert "4 warnings (spread 4): the list is in the run's warnings.txt" in text and "WARNING:" not in text
    assert "1.1 [1-2]" in text  # the spread is in the row, not only in the warnings
    # counts from each side's first run, with their range over the runs, and no ratio
    assert results["compile_cost"]["gpt2"]["upstream"]["generated_kb"] == 10.0
    assert results["compile_cost"]["gpt2"]["upstream"]["generated_kb_range"] == [10.0, 20.0]
    assert set(results["compile_cost"]["gpt2"]["ratio"]) == set(with_min(COMPILE_TIMES))
    assert "gpt2 generated_files" in text

    runs[1] = _synthetic_run("fork", 1.0, status="RuntimeError: boom")
    results = aggregate(runs, _meta(3))
    assert results["decode"]["gpt2"]["fork"] == {"status": "RuntimeError: boom"}
    assert results["compile_cost"]["gpt2"]["fork"] == {"status": "RuntimeError: boom"}
    assert results["calls"]["gpt2"]["fork"] == {"status": "RuntimeError: boom", "generate_compile": None}
    assert set(results["decode"]["gpt2"]["ratio"].values()) == {None}
    assert "RuntimeError: boom" in table(results)


def _speculative_entry(ms: float, status: str = "ok", **counts) -> dict:
    entry = {
        "status": status, "ms_per_token_floor": ms, "ms_per_token": ms, "ms_per_token_min": ms,
        "ms_per_token_max": ms, "forward_calls": 32, "decode_mask_shapes": 1, "graphs_first_call": 1, "graphs": 1,
        "same_tokens": True, "draft_tokens": None, "new_tokens": 32,
    }  # fmt: skip
    return {**entry, **counts} if status == "ok" else {"status": status}


def test_speculative_summary_and_its_paragraph():
    """Each method's figures per tree, fork / upstream, and the fork's against its call without speculation and its
    step; an error is shown as its first line without the generated kernel's path; the decoding step's summary keeps
    to the regular loop's entries."""
    error = "RuntimeError: kernel, /tmp/torchinductor_root/az/cazw.main.cpp:95, index out of bounds: 0 <= tmp10 < 43L"
    decode = {
        "llama speculative none": {"upstream": _speculative_entry(2.0), "fork": _speculative_entry(1.8)},
        "llama speculative assistant": {
            "upstream": _speculative_entry(3.0, draft_tokens=4),
            "fork": _speculative_entry(2.7, draft_tokens=4, forward_calls=7, decode_mask_shapes=2, graphs=2),  # 32 / 5
        },
        "llama speculative prompt_lookup": {
            "upstream": _speculative_entry(0, status=error),
            "fork": _speculative_entry(2.4, draft_tokens=3, forward_calls=18, graphs=3),
        },
        "llama speculative decoding_step": {
            "upstream": {"status": "not in this tree"},
            "fork": _speculative_entry(0.9),
        },
    }
    summary = report.speculative_summary(decode)
    assert set(summary) == set(decode) and report.decoding_step_summary(decode) == {}
    assistant = summary["llama speculative assistant"]
    assert assistant["ratio"]["floor"] == pytest.approx(0.9)
    assert assistant["vs_none"]["floor"] == pytest.approx(1.5) and assistant["vs_decoding_step"]["floor"] == 3.0
    assert summary["llama speculative prompt_lookup"]["upstream"] == {"status": error}
    assert summary["llama speculative prompt_lookup"]["ratio"] is None
    paragraph = publish.lines_for_speculative({"speculative": summary})
    assert (
        "drafting 4 tokens a step (every one accepted): 3.000 ms -> 2.700 ms (**0.90x**; medians 0.90x [0.90x-"
        in paragraph
    )
    assert "ran 7 forwards, its verification forward took 2 shapes, 2 graphs compiled (some after" in paragraph
    assert "prompt lookup (3 candidates at most): `RuntimeError: kernel, <file>, index out of bounds" in paragraph
    assert "without speculation 2.000 ms -> 1.800 ms, and the fork's compiled decoding step 0.900 ms" in paragraph
    assert "/tmp/" not in paragraph and "OTHER TOKENS" not in paragraph
    assert "(every one accepted)" in paragraph
    assert "The verification forward's length changes from step to step" in paragraph
    assert "ran 18 forwards, its verification forward took 1 shape, 3 graphs compiled (some after" in paragraph
    # one shape per method, on the fork's side: the fixed length is said so
    decode["llama speculative assistant"]["fork"].update(decode_mask_shapes=1)
    paragraph = publish.lines_for_speculative({"speculative": report.speculative_summary(decode)})
    assert "verifies a fixed number of positions (the candidates padded to the most drafted): one shape." in paragraph
    decode["llama speculative assistant"]["fork"].update(same_tokens=False, forward_calls=9)
    paragraph = publish.lines_for_speculative({"speculative": report.speculative_summary(decode)})
    assert "OTHER TOKENS" in paragraph and "(9 verifications: not every one accepted)" in paragraph


def test_an_entry_of_the_first_run_only_survives_a_rerun_of_its_decode():
    """The size row is timed in a tree's first run only: when a rerun replaced that run's decode, it comes from the
    first run itself rather than from no run."""
    runs = [_synthetic_run(side, 1.0) for side in SIDES]
    for run in runs:
        run["scenarios"]["decode"]["big"] = _decode_entry(3.0)
    rerun = {**_synthetic_run("fork", 0.9), "rerun": True}
    runs[1]["used"] = False
    results = aggregate([*runs, rerun], _meta(1))
    assert results["decode"]["gpt2"]["fork"]["ms_per_token_min"] == 0.9  # the rerun's decode was kept
    # the floors over every attempt: the replaced run's faster segments count
    slow_rerun = {**_synthetic_run("fork", 2.0), "rerun": True}
    floor = aggregate([*runs, slow_rerun], _meta(1))["decode"]["gpt2"]["fork"]["ms_per_token_floor"]
    assert floor == pytest.approx(1.0) and results["decode"]["gpt2"]["fork"]["ms_per_token_floor"] == pytest.approx(
        0.9
    )
    assert results["decode"]["big"]["fork"]["runs"] == 1 and results["decode"]["big"]["fork"]["ms_per_token"] == 3.0


def test_compile_cost_comes_from_cold_runs_only():
    """By default a tree's later runs reuse its inductor cache: their first call is no compile cost."""
    runs = [_synthetic_run("upstream", 1.0), _synthetic_run("fork", 2.0)]
    runs += [_synthetic_run("upstream", 0.1, cold=False), _synthetic_run("fork", 0.1, cold=False)]
    cost = aggregate(runs, _meta(2))["compile_cost"]["gpt2"]
    assert cost["upstream"]["runs"] == cost["fork"]["runs"] == 1
    assert cost["ratio"]["first_generate_s"] == 2.0


def test_stall_detection():
    clean = _decode_entry(0.4, calls=11, tokens=32)
    assert stalls(clean)["stalled_steps"] == 0 and stalls(clean)["share"] == 0
    assert stalled({"scenarios": {"decode": {"gpt2": clean}}}) == {}
    # a few steps descheduled for 20 ms: far above the run's median step, and most of its decode time
    hit = _decode_entry(0.4, calls=11, tokens=32, stall_ms=20.0, stalled_calls=1)
    summary = stalls(hit)
    assert summary["stalled_steps"] == 30 and summary["steps"] == 11 * 30
    assert summary["fast_step_ms"] == pytest.approx(0.4, rel=0.02) and summary["share"] > STALL_SHARE
    found = stalled({"scenarios": {"decode": {"gpt2": hit, "llama": clean}}})
    assert set(found) == {"gpt2"}
    assert describe_stalls(found).startswith(
        "gpt2: 30 of 330 decode steps over 5x the run's 10th-percentile step (0.39"
    )
    # most of a run's calls stalled: still told from its fast steps
    assert set(stalled({"scenarios": {"decode": {"gpt2": _decode_entry(0.4, 11, 32, 20.0, stalled_calls=8)}}})) == {
        "gpt2"
    }
    # a step a little slow is no stall, and a failed model has nothing to check
    slow = _decode_entry(0.4, calls=11, tokens=32, stall_ms=0.4, stalled_calls=11)
    assert stalled({"scenarios": {"decode": {"gpt2": slow, "llama": {"status": "RuntimeError: boom"}}}}) == {}


def test_a_stalled_run_cannot_flip_the_ranking():
    """The fork is faster (0.6 against 1.0 ms per step), but 3 of its 5 runs stalled in every call (each step
    descheduled for 15 ms, as in a run where every decode step took ~16 ms): the medians over the runs say the fork is
    many times slower, the published ratio (of the floors) still says 0.6."""
    runs = []
    for rep in range(5):
        runs.append(_synthetic_run("upstream", 1.0))
        runs.append(_synthetic_run("fork", 0.6, stall_ms=15.0, stalled_calls=5 if rep < 3 else 0))
    decode = aggregate(runs, _meta(5))["decode"]["gpt2"]
    assert decode["ratio"]["ms_per_token"] > 5  # what a median reports
    for key in ("ms_per_token", "host_ms_per_token", "forward_ms_per_token", "forward_alone_ms"):
        assert decode["ratio"][f"{key}_floor"] == pytest.approx(0.6), key
    # and with stalls on both sides, in every run but one each, the ranking and the ratio hold
    runs = []
    for rep in range(5):
        runs.append(_synthetic_run("upstream", 1.0, stall_ms=40.0, stalled_calls=2 if rep else 0))
        runs.append(_synthetic_run("fork", 0.6, stall_ms=90.0, stalled_calls=4 if rep != 2 else 0))
    decode = aggregate(runs, _meta(5))["decode"]["gpt2"]
    assert decode["ratio"]["ms_per_token_floor"] == pytest.approx(0.6)
    # even a stall in every call of every run leaves the floor alone when it falls in different steps
    runs = []
    for rep in range(5):
        runs.append(_synthetic_run("upstream", 1.0))
        fork = _synthetic_run("fork", 0.6)
        for n, call in enumerate(fork["scenarios"]["decode"]["gpt2"]["timed_segments_ms"]):
            call["host"][1 + (n + rep) % 4] += 50.0
        runs.append(fork)
    assert aggregate(runs, _meta(5))["decode"]["gpt2"]["ratio"]["ms_per_token_floor"] == pytest.approx(0.6)


def test_a_stalled_run_is_run_again_and_said_so(tmp_path, monkeypatch, capsys):
    """After the planned runs, the driver runs again the decode (only the decode) of the stalled runs, first those of
    the tree with more stalled runs (here the fork: 2 against 1, though upstream's stalled most), within its budget;
    of each run it keeps the attempt that stalled least, and says so."""
    script = {
        ("upstream", 0, 0): _synthetic_run("upstream", 1.0),
        ("fork", 0, 0): _synthetic_run("fork", 0.6, stall_ms=20.0, stalled_calls=3),
        ("fork", 0, 1): _synthetic_run("fork", 0.6, stall_ms=40.0, stalled_calls=3),
        ("fork", 0, 2): _synthetic_run("fork", 0.6),
        ("upstream", 1, 0): _synthetic_run("upstream", 1.0, cold=False, stall_ms=40.0, stalled_calls=3),
        ("upstream", 1, 1): _synthetic_run("upstream", 1.0, cold=False),
        ("fork", 1, 0): _synthetic_run("fork", 0.6, cold=False, stall_ms=10.0, stalled_calls=3),
    }
    seen = []

    def fake_run_one(side, name, src, scenarios, args, out, cache):
        seen.append((name, tuple(scenarios)))
        rep, _, attempt = name.split("-", 1)[1].partition("-rerun")
        result = json.loads(json.dumps(script[(side, int(rep), int(attempt or 0))]))
        return {**result, "raw": f"raw/{name}.json", "log": f"logs/{name}.log"}, 1.0

    monkeypatch.setattr(bench_main, "run_one", fake_run_one)
    args = parse_args(["--reps", "2", "--reruns", "3"])
    results, runs = bench_main.run_sides(args, {side: tmp_path / side for side in SIDES}, tmp_path / "out")
    # the fork's most stalled run twice (its first rerun stalled more), then, with one stalled run per tree, upstream's
    names = ["upstream-0", "fork-0", "upstream-1", "fork-1", "fork-0-rerun1", "fork-0-rerun2", "upstream-1-rerun1"]
    assert [name for name, _ in seen] == names
    timed = ("decode", "speculative")  # what a later run times again, and a rerun
    assert dict(seen)["upstream-1-rerun1"] == timed and dict(seen)["upstream-1"] == timed
    assert "recompiles" in dict(seen)["fork-0"]
    # kept: fork-0's clean second rerun, upstream-1's clean rerun, the stalled fork-1 (no budget left)
    assert [run["used"] for run in runs] == [True, False, False, True, False, True, True]
    assert runs[1]["stalled"].startswith("gpt2: ") and runs[5]["stalled"] is None and runs[6]["stalled"] is None
    assert set(runs[1]["stalled_models"]) == {"gpt2", "gpt2 eos"} and runs[5]["stalled_models"] == {}
    assert runs[2]["stall_share"] > runs[1]["stall_share"] > runs[3]["stall_share"] > STALL_SHARE
    out = capsys.readouterr().out
    assert "bench: run 2/2 upstream: 1.0 s, stalled (" in out
    assert "bench: rerun 1/3: fork run 1's decode (stalls: " in out
    assert "bench: rerun 3/3: upstream run 2's decode (stalls: " in out and "bench: rerun 3: 1.0 s, kept" in out
    assert "stalled as much or more" in out and "the first one kept" in out
    assert "bench: still stalled, with no rerun left: fork run 2" in out
    decode = aggregate(results, {**_meta(2), "runs": runs})["decode"]["gpt2"]
    assert decode["fork"]["runs"] == decode["upstream"]["runs"] == 2
    assert decode["fork"]["reruns"] == 2 and decode["upstream"]["reruns"] == 1
    assert decode["fork"]["stalled_runs"] == 1 and decode["upstream"]["stalled_runs"] == 0
    assert "2 (2 reruns after stalls, 1 still stalled)" in table(aggregate(results, {**_meta(2), "runs": runs}))


def test_a_rerun_is_compared_with_its_run_on_what_both_timed(tmp_path, monkeypatch):
    """A first run that stalled only on an entry its rerun does not time again (the size row) keeps its decode when
    the rerun stalls on the decode: the two are compared on the entries both timed."""
    first = _synthetic_run("fork", 0.6)
    first["scenarios"]["decode"]["big"] = _decode_entry(3.0, stall_ms=200.0, stalled_calls=3)
    script = {
        ("upstream", 0, 0): _synthetic_run("upstream", 1.0),
        ("fork", 0, 0): first,
        ("fork", 0, 1): _synthetic_run("fork", 0.6, stall_ms=20.0, stalled_calls=3),
    }

    def fake_run_one(side, name, src, scenarios, args, out, cache):
        rep, _, attempt = name.split("-", 1)[1].partition("-rerun")
        result = json.loads(json.dumps(script[(side, int(rep), int(attempt or 0))]))
        return {**result, "raw": f"raw/{name}.json", "log": f"logs/{name}.log"}, 1.0

    monkeypatch.setattr(bench_main, "run_one", fake_run_one)
    _, runs = bench_main.run_sides(
        parse_args(["--reps", "1", "--reruns", "1"]), {s: tmp_path / s for s in SIDES}, tmp_path
    )
    assert (
        runs[1]["stall_share"] > runs[2]["stall_share"] > STALL_SHARE
    )  # over all its entries, the first run stalled more
    assert [run["used"] for run in runs] == [True, True, False]  # but not on the decode: it is kept


def _summary(side: str, rep: int, rerun: bool = False, **stalled_models: float) -> dict:
    """A run's summary as `run_sides` records it, as much as `next_rerun` reads: the stall share of each model it
    stalled on."""
    return {"side": side, "rep": rep, "rerun": rerun, "used": True, "stalled_models": stalled_models}


def _rerun(runs: list[dict], budget: int, outcome=lambda side, rep, attempt: {}) -> list[tuple[str, int]]:
    """Drives `next_rerun` as `run_sides` does, each rerun stalling as `outcome` says (clean by default), keeping of
    each run the attempt that stalled least; returns the runs picked, in order."""
    picked = []
    for _ in range(budget):
        slot = bench_main.next_rerun(runs)
        if slot is None:
            break
        picked.append(slot)
        before = next(run for run in runs if (run["side"], run["rep"]) == slot and run["used"])
        attempt = 1 + sum(1 for run in runs if run["rerun"] and (run["side"], run["rep"]) == slot)
        after = _summary(*slot, rerun=True, **outcome(*slot, attempt))
        if max(after["stalled_models"].values(), default=0) < max(before["stalled_models"].values()):
            before["used"] = False
        else:
            after["used"] = False
        runs.append(after)
    return picked


def test_reruns_go_to_the_tree_with_more_stalled_runs():
    """The load that flipped Llama's median: every fork run stalled on Llama, a little; upstream's runs stalled more,
    but fewer of them. The most stalled run first would give upstream all 3 reruns; the fork gets them until its
    stalled runs no longer outnumber upstream's by more than upstream's outnumber the fork's on GPT2."""
    runs = [
        _summary("upstream", rep, **({"gpt2": 0.6} if rep < 2 else {"llama": 0.5} if rep == 2 else {}))
        for rep in range(5)
    ]
    runs += [_summary("fork", rep, llama=0.2) for rep in range(5)]
    assert _rerun(runs, 3) == [("fork", 0), ("fork", 1), ("upstream", 0)]
    # with both trees stalled alike on one model, the reruns alternate, the tree whose stalls weigh more first
    runs = [_summary("upstream", rep, llama=0.3) for rep in range(2)] + [
        _summary("fork", rep, llama=0.25) for rep in range(2)
    ]
    assert _rerun(runs, 5) == [("upstream", 0), ("fork", 0), ("upstream", 1), ("fork", 1)]
    assert bench_main.next_rerun(runs) is None  # nothing stalled is left


def test_a_rerun_that_stalls_again_keeps_its_tree_in_front_within_the_cap():
    """A run is run again at most RERUNS_PER_RUN times; while its tree still has more stalled runs, the next rerun is
    that tree's next most stalled run, not the other tree's."""
    runs = [_summary("upstream", 0, gpt2=0.9), _summary("fork", 0, gpt2=0.5), _summary("fork", 1, gpt2=0.3)]
    picked = _rerun(runs, 4, outcome=lambda side, rep, attempt: {"gpt2": 0.95})
    assert picked == [("fork", 0)] * bench_main.RERUNS_PER_RUN + [("fork", 1)] * bench_main.RERUNS_PER_RUN
    assert bench_main.next_rerun(runs) == ("upstream", 0)
    assert bench_main.next_rerun([_summary("upstream", 0), _summary("fork", 0)]) is None


def test_a_median_that_contradicts_the_floor_is_shown_with_both_trees_stall_counts():
    """3 of the fork's 5 runs stalled in 3 of their 5 calls: its median ratio says slower (> 1), its floor faster (0.6). The
    table's warnings and the published table show that median with the stalled runs of both trees."""
    runs = []
    for rep in range(5):
        runs.append(_synthetic_run("upstream", 1.0, stall_ms=15.0, stalled_calls=3 if rep == 0 else 0))
        runs.append(_synthetic_run("fork", 0.6, stall_ms=15.0, stalled_calls=3 if rep < 3 else 0))
    meta = {**_meta(5), "created": "2026-12-01T10:00:00+00:00", "quick": False, "long": False, "runs": []}
    results = aggregate(runs, meta)
    decode = results["decode"]["gpt2"]
    assert decode["ratio"]["ms_per_token"] > 1 > decode["ratio"]["ms_per_token_floor"]
    line = next(w for w in results["warnings"] if w.startswith("decode.gpt2: "))
    median = decode["ratio"]["ms_per_token"]
    assert f"ms_per_token {median:.2f}x by the median, 0.60x by the floor" in line
    assert line.endswith("; stalled runs: upstream 1 of 5, fork 3 of 5 (the floors are the verdict)")
    assert "stalls 6): the list is in the run's warnings.txt" in table(results)
    row = next(r for r in publish.render_table(results).splitlines() if r.startswith("| GPT2: ms per token |"))
    assert row.endswith(f"| 0.60x ({median:.2f}x; stalled runs: upstream 1 of 5, fork 3 of 5) |")
    # where the median and the floor agree, neither says more
    clean = aggregate([_synthetic_run(side, 1.0 if side == "upstream" else 0.6) for side in SIDES], _meta(1))
    assert not any(w.startswith("decode.") for w in clean["warnings"])
    assert "stalled runs" not in publish.render_table({**clean, "quick": False})


def test_the_plot_tells_each_series_apart():
    """Each line of the plot's left side (model x tree) has its own colour, line style and marker, and the legend
    names each."""
    import matplotlib.pyplot as plt

    results = aggregate([_synthetic_run("upstream", 1.0), _synthetic_run("fork", 0.6)], _meta(1))
    for model in ("llama", "gemma2"):
        results["decode"][model] = results["decode"]["gpt2"]
    results.update(environment={"load_average": {"start": 1.0, "end": 1.0}})
    fig = report.figure(results)
    try:
        lines = fig.axes[0].get_lines()
        labels = [line.get_label() for line in lines]
        assert labels == [f"{model} {side}" for model in ("gpt2", "llama", "gemma2") for side in SIDES]
        assert len({line.get_color() for line in lines}) == 6
        assert len({(line.get_linestyle(), line.get_marker()) for line in lines}) == 6
        assert {line.get_linestyle() for line in lines if line.get_label().endswith(" fork")} == {"-"}
        assert [text.get_text() for text in fig.axes[0].get_legend().get_texts()] == labels
    finally:
        plt.close(fig)


def test_run_plan_estimate_and_first_line():
    plan = bench_main.run_plan(parse_args([]))
    assert [(rep, side) for rep, side, _ in plan] == [(rep, side) for rep in range(3) for side in SIDES]
    # the first run of a tree: what the headline reads (tracing and the mask matrix only with --long)
    assert plan[0][2] == ["decode", "size", "speculative", "recompiles"] and plan[2][2] == ["decode", "speculative"]
    long_plan = bench_main.run_plan(parse_args(["--long"]))
    assert {"depth", "tracing", "mask_matrix"} <= set(long_plan[0][2]) and "depth" in long_plan[2][2]
    assert bench_main.run_plan(parse_args(["--long"]))[2][2] == ["decode", "depth", "speculative", "calls"]
    assert len(bench_main.run_plan(parse_args(["--only", "tracing,mask_matrix"]))) == 2
    assert bench_main.run_plan(parse_args(["--quick"]))[0][2] == list(bench_main.CHILD_SCENARIOS)
    assert bench_main.run_plan(parse_args(["--only", "first_call"])) == []
    quiet = bench_main.estimate_s(parse_args([]), cores=2, load=0.0)
    assert 900 < quiet < 3000 and bench_main.estimate_s(parse_args([]), cores=2, load=6.0) == 2 * quiet
    assert bench_main.estimate_s(parse_args([]), cores=2, load=1.5) == quiet
    assert bench_main.estimate_s(parse_args(["--long"]), cores=2, load=0.0) > quiet


def test_unknown_scenario_is_refused():
    with pytest.raises(SystemExit):
        parse_args(["--only", "decode,nope"])


def test_pristine_tree_is_extracted_once():
    tree = pristine_tree()
    marker = tree / ".complete"
    before = marker.stat().st_mtime_ns
    assert pristine_tree() == tree and marker.stat().st_mtime_ns == before
    assert (tree / "src" / "transformers" / "__init__.py").is_file()


def test_pristine_tree_is_extracted_once_by_concurrent_callers(tmp_path, monkeypatch):
    """Tests in parallel on a fresh clone call `pristine_tree` at once: one extracts, the others wait for it and keep
    its folder (a second extraction would remove the tree a first caller's process imports from)."""
    extractions = []
    real_extract = trees.extract_sdist

    def slow_extract(sdist, dest):
        extractions.append(dest)
        time.sleep(0.5)  # the other caller arrives while this one extracts
        real_extract(sdist, dest)

    monkeypatch.setattr(trees, "extract_sdist", slow_extract)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: pristine_tree(bench_dir=tmp_path), range(2)))
    assert results[0] == results[1] and len(extractions) == 1
    assert (results[0] / "src" / "transformers" / "__init__.py").is_file()


def test_scenarios_run_on_a_settled_heap():
    """A scenario runs with the objects alive before it frozen, and leaves nothing frozen, even when it fails."""
    assert guarded(lambda: {"frozen": gc.get_freeze_count()})["frozen"] > 0
    assert gc.get_freeze_count() == 0

    def failing():
        raise RuntimeError("boom")

    assert guarded(failing) == {"status": "RuntimeError: boom"}
    assert gc.get_freeze_count() == 0


def _published(tmp_path: Path) -> tuple[Path, dict]:
    """A run folder with an aggregated synthetic results.json and a plot, as `python -m bench` writes them."""
    runs = [run for _ in range(3) for run in (_synthetic_run("upstream", 1.0), _synthetic_run("fork", 0.6))]
    meta = {**_meta(3), "created": "2026-12-01T10:00:00+00:00", "quick": False, "long": False, "runs": []}
    meta["environment"] = {"torch": "2.13.0", "cpu_count": 2, "load_average": {"start": 1.5, "end": 2.0}}
    results = aggregate(runs, meta)
    results["plot"] = "decode.png"
    run = tmp_path / "bench-out" / "20261201-100000"
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(results), encoding="utf-8")
    (run / "decode.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return run, results


def test_publish_writes_docs_and_the_readme_blocks(tmp_path):
    run, results = _published(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text(
        "# title\n\n<!-- bench:headline -->\nstale figures\n<!-- /bench:headline -->\n\ntext\nend\n", encoding="utf-8"
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "bench.md").write_text("# bench\n\n<!-- bench:table -->\n<!-- /bench:table -->\nend\n")
    quick = tmp_path / "bench-out" / "20261201-110000"  # later, but --quick: not published
    quick.mkdir()
    (quick / "results.json").write_text(json.dumps({**results, "quick": True}), encoding="utf-8")
    guards = tmp_path / "bench-out" / "guards-20261201-120000"  # sorted after the runs, another table: not published
    guards.mkdir()
    (guards / "results.json").write_text(json.dumps({"trees": {}}), encoding="utf-8")
    assert publish.latest_run(tmp_path) == run
    written = publish.publish(run, tmp_path)
    assert {path.relative_to(tmp_path).as_posix() for path in written} == {
        "docs/bench-results.json",
        "docs/bench-decode.png",
        "README.md",
        "docs/bench.md",
    }
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# title\n\n<!-- bench:headline -->\n**What the fork buys**") and text.endswith("end\n")
    assert "stale figures" not in text and "\ntext\n" in text
    headline = publish.block(text, "headline")
    assert (
        "| time per token, `torch.compile(model.forward, dynamic=False)` | 1.000 -> 0.600 ms (**0.60x**) |" in headline
    )
    assert "load average 1.5 at the start and 2.0 at the end" in headline
    assert "No GPU figure exists yet" in headline
    table = publish.block((tmp_path / "docs" / "bench.md").read_text(encoding="utf-8"), "table")
    assert "| GPT2: ms per token | **1.000**; 1.000 | **0.600**; 0.600 | 0.60x (0.60x) |" in table
    assert (
        "| host time per token, with an eos token and `min_new_tokens` | 0.500 -> 0.300 ms (**0.60x**) |" in headline
    )
    assert "| GPT2, eos: ms per token |" in table
    goals = "The project's goals: host time per token at most 0.3x upstream's: GPT2 0.60x, not met by GPT2; "
    assert goals in table
    assert "with an eos token and `min_new_tokens` at most 0.45x upstream's: GPT2 0.60x, not met by GPT2" in table
    # 3 cold compiles per tree, whose ranges do not overlap: a verdict
    assert "first compile (CPU time) at most 1x upstream's: GPT2 0.60x, met" in table
    assert publish.out_of_sync(tmp_path) == []
    readme.write_text(text.replace("0.60x", "0.50x"), encoding="utf-8")  # a figure typed by hand
    assert publish.out_of_sync(tmp_path) == ["headline"]

    readme.write_text("no blocks\n", encoding="utf-8")
    with pytest.raises(publish.PublishError, match="bench:headline"):
        publish.publish(run, tmp_path)
    results["quick"] = True
    (run / "results.json").write_text(json.dumps(results), encoding="utf-8")
    with pytest.raises(publish.PublishError, match="--quick"):
        publish.publish(run, tmp_path)


def test_compile_goal_has_no_verdict_from_too_few_or_overlapping_cold_compiles():
    def goals(upstream_scales, fork_scales):
        runs = [_synthetic_run("upstream", scale) for scale in upstream_scales]
        runs += [_synthetic_run("fork", scale) for scale in fork_scales]
        return publish.render_goals(aggregate(runs, _meta(len(upstream_scales))))[0]

    assert (
        "first compile (CPU time) at most 1x upstream's: GPT2 0.90x, no verdict (1 cold compile per tree, fewer than 3)"
        in goals([1.0], [0.9])
    )
    overlapping = goals([1.0, 1.2, 1.1], [0.9, 1.05, 1.0])
    assert "GPT2 0.91x, no verdict (3 cold compiles per tree, ranges that overlap)" in overlapping
    assert "GPT2 0.82x, met" in goals([1.0, 1.2, 1.1], [0.9, 0.95, 0.85])
    assert "GPT2 1.23x, not met by GPT2" in goals([1.0, 1.02, 1.1], [1.2, 1.3, 1.25])


def test_first_calls_give_each_kinds_least_and_a_cold_verdict_only_from_three_apart():
    def found(upstream_cold, fork_cold, fork_warm_isa_ok=(2.9, 2.4)):
        cold = {"upstream": upstream_cold, "fork": fork_cold}
        paths = {
            side: {
                path: {
                    "cold": cold[side],
                    "cold_cpu": cold[side],
                    "warm": [3.3, 3.1],
                    "primer_vec_isa_ok": [4.0],
                    "warm_vec_isa_ok": list(fork_warm_isa_ok),
                }
                for path in (("compile_config",) if side == "upstream" else ("compile_config", "decoding_step"))
            }
            for side in SIDES
        }
        return {"torch_version": "2.13.0", "models": {"llama": paths}}

    summary = report.first_call_summary(found([20.0], [25.0]))
    by_path = summary["models"]["llama"]
    assert by_path["compile_config"]["upstream"]["warm"] == {"least": 3.1, "most": 3.3, "processes": 2}
    assert by_path["compile_config"]["ratio"]["cold"] == 1.25
    # one cold compile per tree gives no verdict; the step runs on the fork only, with no ratio
    assert by_path["compile_config"]["cold_verdict"] is None
    assert set(by_path["decoding_step"]) == {"fork"}
    apart = report.first_call_summary(found([20.0, 21.0, 22.0], [25.0, 26.0, 27.0]))
    assert apart["models"]["llama"]["compile_config"]["cold_verdict"] == "pristine faster"
    overlapping = report.first_call_summary(found([20.0, 21.0, 26.0], [25.0, 26.0, 27.0]))
    assert overlapping["models"]["llama"]["compile_config"]["cold_verdict"] == "ranges overlap"
    assert report.first_call_summary(None) is None
    # processes that failed: their error, and the run's other figures kept (bench.__main__ writes them)
    failed = {**_meta(1), "first_call": {"status": "first call of fork llama decoding_step (cold) failed"}}
    results = aggregate([_synthetic_run("upstream", 1.0), _synthetic_run("fork", 0.6)], failed)
    assert results["first_call"]["status"].startswith("first call of fork") and "decode" in results
    assert "the first generate of a new process (bench.first_call): first call of fork" in report.table(results)

    # the goal reads the fork's step on a warm cache with the variable set, and says the plain warm one too
    met = publish.render_goals({"first_call": summary})[0]
    assert (
        "Llama 3.10 s (2.40 s with `TORCHINDUCTOR_VEC_ISA_OK=1`), not met by Llama, met with the variable set" in met
    )
    missed = publish.render_goals({"first_call": report.first_call_summary(found([20.0], [25.0], (3.4, 3.2)))})
    assert "not met by Llama, and with the variable set not by Llama" in missed[0]


def test_readme_figures_are_the_published_run():
    """The README's headline is on its first screen (after what the fork changes for a model and the one line that
    turns the compiled step on), and its generated blocks are what docs/bench-results.json gives: `make
    bench-publish` writes them, nobody types them."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text.index("<!-- bench:headline -->") < len("\n".join(text.splitlines()[:40]))
    assert publish.out_of_sync(REPO) == []


def test_host_ab_table_gives_each_tree_its_least_host_time_and_ratio_to_pristine():
    from bench import host_ab

    def run(greedy, eos):
        return {"gpt2 greedy": {"host_us": greedy, "forward_us": 1.0}, "gpt2 eos": {"host_us": eos, "forward_us": 1.0}}

    results = {"pristine": [run(200, 300), run(180, 320)], "after 16 (0016)": [run(100, 90), run(90, 150)]}
    text = host_ab.table(list(results), results)
    assert text.splitlines() == [
        "| tree | gpt2 greedy | gpt2 eos |",
        "|---|---|---|",
        "| pristine | 180 | 300 |",
        "| after 16 (0016) | 90 (0.50x) | 90 (0.30x) |",
    ]
    with pytest.raises(SystemExit, match="patches, not 99"):
        host_ab.main(["--after", "99"])


def test_guards_table_gives_each_tree_its_least_times_and_evaluations():
    from bench import guards

    def run(guarded, skipped, step=None, evaluation_us=90):
        evaluation = {"evaluated_guards": 500, "evaluation_us": evaluation_us, "config_reads": 13}
        found = {"gpt2 compile_config": {"guards": guarded, "skipped": skipped, **evaluation}}
        if step is not None:
            found["gpt2 decoding_step"] = {
                "guards": step, "all_guards": step + 50, "skipped": step - 10,
                "evaluated_guards": 90, "evaluation_us": 4, "config_reads": 0,
                "evaluated_guards_checked": 600, "evaluation_us_checked": evaluation_us, "config_reads_checked": 13,
            }  # fmt: skip
        return found

    results = {
        "pristine": [run(900, 800), run(950, 780, evaluation_us=80)],
        "fork": [run(600, 500, 450), run(620, 480, 430, evaluation_us=70)],
    }
    assert guards.table(list(results), results).splitlines() == [
        "| tree | entry | us per token | with all guards at every step | every guard skipped "
        "| one evaluation of the guards of a later step: guards / us / config reads | of a call's first step |",
        "|---|---|---|---|---|---|---|",
        "| pristine | gpt2 compile_config | 900 | - | 780 | 500 / 80 / 13 | - |",
        "| fork | gpt2 compile_config | 600 | - | 480 | 500 / 70 / 13 | - |",
        "| fork | gpt2 decoding_step | 430 | 480 | 420 | 90 / 4 / 0 | 600 / 70 / 13 |",
    ]


def test_a_failing_worker_stops_the_rounds_with_its_error(tmp_path):
    from bench import trees

    with pytest.raises(RuntimeError, match="(?s)bench.no_such_worker on fork, round 1, failed:.*No module named"):
        trees.run_rounds("bench.no_such_worker", {"fork": tmp_path}, 1, tmp_path, tmp_path, [])


def test_frame_locals_are_the_arguments_of_the_code_and_its_closure():
    import functools

    from bench import guards

    def decorate(func):
        @functools.wraps(func)  # its signature is `func`'s for `inspect`; the frame's is `(self, *args, **kwargs)`
        def wrapper(self, *args, flag=True, **kwargs):
            return func(self, *args, **kwargs)

        return wrapper

    @decorate
    def forward(self, input_ids, mask=None):
        return input_ids

    f_locals = guards._frame_locals(forward, ("model", 1), {"mask": 2})
    assert f_locals == {
        "self": "model",
        "args": (1,),
        "flag": True,
        "kwargs": {"mask": 2},
        "func": forward.__wrapped__,
    }


def test_guard_evaluation_counts_the_guards_and_the_config_reads_among_them():
    import torch
    from bench import guards

    from transformers import GPT2Config

    def step(config, x):
        return x * config.layer_norm_epsilon if config.return_dict else x

    config = GPT2Config()
    compiled = torch.compile(step, backend="eager", fullgraph=True)
    with torch.no_grad():  # as `generate` runs, and the evaluation with it
        compiled(config, torch.ones(2))
    found = guards.guard_evaluation(step.__code__, {"config": config, "x": torch.ones(2)}, evaluations=10)
    assert found["evaluated_guards"] > 2
    assert found["config_reads"] == 2  # `layer_norm_epsilon` and `return_dict`, read again at each call
    assert found["evaluation_us"] > 0
    with pytest.raises(RuntimeError, match="no compiled entry of step accepts"):
        guards.guard_evaluation(step.__code__, {"config": config, "x": torch.ones(3, 3)}, evaluations=10)


def test_gpu_check_runs_both_trees_up_to_the_device_calls(tmp_path):
    # `make bench-gpu` on the CPU: every path of both trees, the figures it reports, no device call
    out = tmp_path / "gpu"
    env = dict(os.environ, PYTHONPATH=str(REPO / "utils"))
    command = [sys.executable, "-m", "bench.gpu_check", "--device", "cpu", "--models", "gpt2", "--calls", "1"]
    result = subprocess.run([*command, "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"upstream", "fork"}
    assert set(results["upstream"][0]["figures"]) == {"gpt2 compile_config", "gpt2 recipe"}
    assert set(results["fork"][0]["figures"]) == {"gpt2 compile_config", "gpt2 recipe", "gpt2 decoding_step"}
    for figures in results["fork"][0]["figures"].values():
        assert isinstance(figures["ms_per_token"], float)  # a figure, not a timing checked (a stall moves it)
        assert figures["recordings per token"] == figures["replays per token"] == 0  # no CUDA graph on the CPU
        assert figures["syncs per step"] is None
        assert figures["recordings per call, passed cache"] == figures["recordings per call, new static cache"]
        assert figures["recordings per call, passed cache"] == [0] * 5
    assert "| gpt2 decoding_step | - / " in (out / "table.md").read_text()
