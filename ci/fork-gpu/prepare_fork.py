"""Make a patched vllm/ tree (from make_carry.sh) run on CUDA without its compiled
extensions: stand-in modules from stubs/, asserted text edits, and the dist-info the
platform probe reads. One set per target (TARGET in make_carry.sh and run):

lvllmds4-x (the default): the fork. Stubs: stubs/*.py (_C, _C_stable_libtorch,
  _moe_C_stable_libtorch, the fork's _version); EDITS; an lvllmds4-x dist-info (the
  fork's platform probe reads that distribution's version).
vllm: upstream vLLM 0.32.0 patched by our series. Its CUDA platform imports only
  _C_stable_libtorch, which registers the `_C` ops there: stubs/upstream/ holds that
  stand-in (it imports stubs/_C.py, placed beside it, whose norms already take upstream's
  optional weight). No _moe_C stand-in (upstream's topk schemas differ from the fork's,
  and the dense cases route no experts) and no _version (the sdist has its own). The same
  four edits: each text is in upstream 0.32.0 once, for the same reason (UPSTREAM_EDITS).
  A vllm dist-info: upstream's probe reads version("vllm"), CUDA unless it names `cpu`.

Usage: prepare_fork.py FORKDIR SITEDIR [lvllmds4-x|vllm]   (then put FORKDIR and SITEDIR on PYTHONPATH)"""

import shutil
import sys
from pathlib import Path

STUBS = Path(__file__).parent / "stubs"
NO_FUSION_PASSES = (
    "    except (ImportError, AttributeError):  # ds4x GPU harness: no compiled _C ops\n"
)
def no_model_tag(drafter: str) -> tuple[str, str, str]:
    """A drafter's loader imports set_model_tag through compilation.backends, whose fusion
    passes read _C ops at import; a no-op with compilation mode NONE."""
    return (f"v1/worker/gpu/spec_decode/{drafter}/utils.py",
            "    from vllm.compilation.backends import set_model_tag\n",
            "    try:\n"
            "        from vllm.compilation.backends import set_model_tag\n" + NO_FUSION_PASSES +
            "        import contextlib\n\n"
            "        def set_model_tag(tag, is_encoder=False):\n"
            "            return contextlib.nullcontext()\n")


EDITS = [
    # vllm_flash_attn raises ImportError without FA2/FA3; TRITON_ATTN is used instead
    ("vllm_flash_attn/__init__.py",
     "if not (FA2_AVAILABLE or FA3_AVAILABLE):\n    raise ImportError(",
     "if False:  # ds4x GPU harness: compiled flash-attn absent\n    raise ImportError("),
    # the MiniMax-M3 warm-up's import chain reads compiled _C ops at module level
    ("model_executor/warmup/kernel_warmup.py",
     "    from vllm.model_executor.warmup.minimax_m3_msa_warmup import (\n"
     "        minimax_m3_msa_warmup,\n"
     "    )\n",
     "    try:\n"
     "        from vllm.model_executor.warmup.minimax_m3_msa_warmup import (\n"
     "            minimax_m3_msa_warmup,\n"
     "        )\n" + NO_FUSION_PASSES +
     "        def minimax_m3_msa_warmup(worker):\n"
     "            return None\n"),
    # EAGLE and DFlash loading import set_model_tag through the same chain; a no-op with
    # compilation mode NONE
    *(no_model_tag(drafter) for drafter in ("eagle", "dflash")),
]
# Upstream 0.32.0, against the fork: vllm_flash_attn/__init__.py raises the same ImportError
# (upstream adds compile_flash_attn_varlen_func_from_specs above it); kernel_warmup() opens
# with the same function-level MiniMax-M3 import (its chain, models/minimax_m3 ->
# compilation passes, reads _C ops at module level in both); load_eagle_model and
# load_dflash_model open with the same function-level set_model_tag import
# (compilation.backends -> pass_manager -> fusion passes). Model runner v2 and v1, the
# dispatcher and the speculators need no other edit; upstream's other readers of
# compilation.backends (gemma4, standalone, extract-hidden-states speculators, the
# attention selector under adaptive verification) are off the harness's path.
UPSTREAM_EDITS = EDITS
# DSpark's loader too, for the fork's DeepSeek-V4 cases (the upstream cases run no DSpark)
FORK_EDITS = [*EDITS, no_model_tag("dspark")]


def dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version.split('+')[0]}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n")


TARGETS = {
    "lvllmds4-x": {"stubs": sorted(STUBS.glob("*.py")), "edits": FORK_EDITS,
                   "dist": ("lvllmds4-x", "0.23.1.dev0+gb7f99cd.cu130")},
    "vllm": {"stubs": [STUBS / "_C.py", STUBS / "upstream" / "_C_stable_libtorch.py"], "edits": UPSTREAM_EDITS,
             "dist": ("vllm", "0.32.0+cu130")},
}


def main(fork: Path, site: Path, target: str = "lvllmds4-x") -> None:
    spec = TARGETS[target]
    vllm = fork / "vllm"
    for stub in spec["stubs"]:
        shutil.copy(stub, vllm / stub.name)
    for rel, old, new in spec["edits"]:
        path = vllm / rel
        text = path.read_text()
        if new not in text:
            assert text.count(old) == 1, f"{rel}: the text to edit is not there once"
            path.write_text(text.replace(old, new))
    dist_info(site, *spec["dist"])


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:4])
