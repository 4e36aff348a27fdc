"""`plan --launch`'s `vllm serve` arguments parse with the patched vLLM's own
argument parser and its draft-depth check (the CPU engine venv), and lk_moe reads
the LK_THREADS the script sets."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ds4x.cli import main
from tests.unit.test_launch import run_script

PARSE = """
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm_ds4x.depth.policy import DraftDepthConfig
args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[2:] + ["--model", sys.argv[1]])
engine = AsyncEngineArgs.from_cli_args(args)
spec = engine.speculative_config
DraftDepthConfig.from_dict(spec["draft_depth"], spec["num_speculative_tokens"])
print(json.dumps({"max_model_len": engine.max_model_len, "max_num_seqs": engine.max_num_seqs,
                  "method": spec["method"], "cudagraph_mode": str(engine.compilation_config.cudagraph_mode),
                  "reasoning_parser": args.reasoning_parser}))
"""


def test_the_serve_arguments_parse_with_vllms_own_parser(engine_python: Path, tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    assert main(["plan", "--launch", str(script), "--model", "/models/DeepSeek-V4-Flash", "-q"]) == 0
    argv = run_script(script, tmp_path)
    done = subprocess.run([engine_python, "-c", PARSE, *argv[1:]], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"max_model_len": 1048576' in done.stdout and '"method": "dspark"' in done.stdout
    assert "FULL_DECODE_ONLY" in done.stdout and '"reasoning_parser": "deepseek_v4"' in done.stdout
    # the same parser refuses a misspelt option: the check above could fail
    bad = subprocess.run([engine_python, "-c", PARSE, argv[1], "--max-num-seq", "2"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert bad.returncode != 0


def test_lk_moe_reads_lk_threads(lk_python: Path) -> None:
    """LK_THREADS is read inside lk_moe's compiled module, not by the fork's Python."""
    find = "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('lk_moe').origin))"
    where = subprocess.run([lk_python, "-c", find], capture_output=True, text=True, check=True).stdout.strip()
    binaries = [p for p in Path(where).rglob("*.so*") if p.is_file()]
    assert binaries and any(b"LK_THREADS" in p.read_bytes() for p in binaries)


CHECK_WITH_VLLM = """
import json
from ds4x.deploy import script_reader
from tests.serve_script import SPEC, USERS

def values(options):  # JSON values compared as values (vLLM writes them back with its own spacing)
    return {k: json.loads(v) if v.startswith("{") else v for k, v in options.items()}


text = USERS.format(threads=1, spec=SPEC)
out = {"parser": script_reader.vllm_parser() is not None,
       "agree": values(script_reader.with_vllm_parser(script_reader.read(text)).options)
       == values(script_reader.read(text).options)}
try:
    script_reader.with_vllm_parser(script_reader.read(text.replace("--max-model-len 1048576", "--max-model-len lots")))
    out["refused"] = False
except script_reader.ScriptError as e:
    out["refused"] = "vLLM's own parser refuses" in str(e)
print(json.dumps(out))
"""


def test_check_launch_reads_the_users_script_with_vllms_own_parser(engine_python: Path) -> None:
    """In a Python with vLLM (the CPU engine venv), --check-launch's reader and `vllm serve`'s own
    parser agree on the user's kind of script, and vLLM's parser is really the one asked (it
    refuses what only it checks)."""
    root = Path(__file__).parents[2]
    done = subprocess.run([engine_python, "-c", CHECK_WITH_VLLM], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == '{"parser": true, "agree": true, "refused": true}'


CHECK_WITH_VLLM_CONFIG = """
import json
from ds4x.deploy import script_reader

spec = {"method": "dspark", "num_speculative_tokens": 2, "draft_depth": {"policy": "fixed"}}
def problems(**changes):
    return script_reader.vllm_config_problems({"--speculative-config": json.dumps({**spec, **changes})})

out = {"good": problems(),
       "range": problems(prompt_lookup_max=-3),
       "fraction": problems(num_speculative_tokens=2.5),
       "unknown": problems(bogus_field=1),
       "depth": problems(draft_depth={"policy": "fixed", "depth": True})}
print(json.dumps(out))
"""


def test_check_launch_asks_vllms_own_speculative_config(engine_python: Path) -> None:
    """In a Python with the patched vLLM, --check-launch checks --speculative-config's fields with
    SpeculativeConfig's own declared types and ranges (what our reader does not know of) and its
    draft_depth with the engine's parser, so that the check cannot drift from the engine."""
    root = Path(__file__).parents[2]
    done = subprocess.run([engine_python, "-c", CHECK_WITH_VLLM_CONFIG], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["good"] == []
    assert found["range"] == ["--speculative-config prompt_lookup_max='-3': vLLM's SpeculativeConfig refuses it: "
                              "Input should be greater than or equal to 1"]
    assert len(found["fraction"]) == 1 and found["fraction"][0].startswith("--speculative-config num_speculative_tokens='2.5'")
    assert len(found["unknown"]) == 1 and "bogus_field: not a field of vLLM's SpeculativeConfig" in found["unknown"][0]
    assert len(found["depth"]) == 1 and "draft_depth: the engine's parser refuses it" in found["depth"][0]
