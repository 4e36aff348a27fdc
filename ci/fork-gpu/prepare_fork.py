"""Make a patched vllm/ tree (from make_carry.sh) run on CUDA without its compiled
extensions: stand-in modules from stubs/, asserted text edits, and the dist-info the
platform probe reads. One set per target (TARGET in make_carry.sh and run):

lvllmds4-x (the default): the fork. Stubs: stubs/*.py (_C, _C_stable_libtorch,
  _moe_C_stable_libtorch, the fork's _version); EDITS; an lvllmds4-x dist-info (the
  fork's platform probe reads that distribution's version).
vllm: upstream vLLM patched by our series (0.32.0, or 0.34.0: the release is read from the
  tree's _version.py, and its edits are UPSTREAM_EDITS[release]). Its CUDA platform imports only
  _C_stable_libtorch, which registers the `_C` ops there: stubs/upstream/ holds that
  stand-in (it imports stubs/_C.py, placed beside it, whose norms already take upstream's
  optional weight). No _moe_C stand-in (upstream's topk schemas differ from the fork's,
  and the dense cases route no experts) and no _version (the sdist has its own). The same
  four edits: each text is in upstream once, for the same reason (UPSTREAM_EDITS).
  A vllm dist-info of the tree's release: upstream's probe reads version("vllm"), CUDA unless it
  names `cpu`.

Usage: prepare_fork.py FORKDIR SITEDIR [lvllmds4-x|vllm]   (then put FORKDIR and SITEDIR on PYTHONPATH)"""

import re
import shutil
import sys
from pathlib import Path

STUBS = Path(__file__).parent / "stubs"
NO_FUSION_PASSES = (  # at a function's top level (4 spaces); deeper: prefix the extra indent
    "    except (ImportError, AttributeError):  # ds4x GPU harness: no compiled _C ops\n"
)


def no_minimax_warmup(indent: str) -> tuple[str, str, str]:
    """kernel_warmup()'s MiniMax-M3 import, at its indent: its chain reads compiled _C ops (and on
    0.34.0 imports the CuTe DSL) at module level; a no-op warm-up instead."""
    i = indent
    return ("model_executor/warmup/kernel_warmup.py",
            f"{i}from vllm.model_executor.warmup.minimax_m3_msa_warmup import (\n"
            f"{i}    minimax_m3_msa_warmup,\n"
            f"{i})\n",
            f"{i}try:\n"
            f"{i}    from vllm.model_executor.warmup.minimax_m3_msa_warmup import (\n"
            f"{i}        minimax_m3_msa_warmup,\n"
            f"{i}    )\n" + i[4:] + NO_FUSION_PASSES +
            f"{i}    def minimax_m3_msa_warmup(worker):\n"
            f"{i}        return None\n")


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


def harness_edits(warmup_indent: str) -> list[tuple[str, str, str]]:
    """The edits of a tree whose kernel_warmup() imports the MiniMax-M3 warm-up at `warmup_indent`."""
    return [
        # vllm_flash_attn raises ImportError without FA2/FA3; TRITON_ATTN is used instead
        ("vllm_flash_attn/__init__.py",
         "if not (FA2_AVAILABLE or FA3_AVAILABLE):\n    raise ImportError(",
         "if False:  # ds4x GPU harness: compiled flash-attn absent\n    raise ImportError("),
        no_minimax_warmup(warmup_indent),
        # EAGLE and DFlash loading import set_model_tag through the same chain; a no-op with
        # compilation mode NONE
        *(no_model_tag(drafter) for drafter in ("eagle", "dflash")),
    ]


EDITS = harness_edits("    ")
# Upstream 0.32.0, against the fork: vllm_flash_attn/__init__.py raises the same ImportError
# (upstream adds compile_flash_attn_varlen_func_from_specs above it); kernel_warmup() opens
# with the same function-level MiniMax-M3 import (its chain, models/minimax_m3 ->
# compilation passes, reads _C ops at module level in both); load_eagle_model and
# load_dflash_model open with the same function-level set_model_tag import
# (compilation.backends -> pass_manager -> fusion passes). Model runner v2 and v1, the
# dispatcher and the speculators need no other edit; upstream's other readers of
# compilation.backends (gemma4, standalone, extract-hidden-states speculators) are off the
# harness's path, and the attention selector's, under adaptive verification, imports it whole
# over stubs/upstream's declared ops. 0.34.0: the same texts, its MiniMax-M3 import one level
# deeper (under `if current_platform.is_cuda()`).
UPSTREAM_EDITS = {"0.32.0": EDITS, "0.34.0": harness_edits("        ")}
# DSpark's loader too, for the fork's DeepSeek-V4 cases (the upstream cases run no DSpark)
FORK_EDITS = [*EDITS, no_model_tag("dspark")]


def dist_info(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version.split('+')[0]}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n")


def upstream_release(vllm: Path) -> str:
    """The release of an upstream tree, from the _version.py its sdist ships."""
    version = vllm / "_version.py"
    found = re.search(r"__version__ = version = '([^']+)'", version.read_text()) if version.is_file() else None
    if not found or found.group(1) not in UPSTREAM_EDITS:
        raise SystemExit(f"{vllm}/_version.py: upstream release {found and found.group(1)}; the GPU harness's "
                         f"stand-ins know {', '.join(UPSTREAM_EDITS)} (prepare_fork.UPSTREAM_EDITS)")
    return found.group(1)


def target_setup(target: str, vllm: Path) -> tuple[list[Path], list[tuple[str, str, str]], tuple[str, str]]:
    """A target's stand-ins, text edits and dist-info (name, version)."""
    if target == "vllm":
        release = upstream_release(vllm)
        stubs = [STUBS / "_C.py", STUBS / "upstream" / "_C_stable_libtorch.py"]
        return stubs, UPSTREAM_EDITS[release], ("vllm", f"{release}+cu130")
    return sorted(STUBS.glob("*.py")), FORK_EDITS, ("lvllmds4-x", "0.23.1.dev0+gb7f99cd.cu130")


def main(fork: Path, site: Path, target: str = "lvllmds4-x") -> None:
    vllm = fork / "vllm"
    stubs, edits, dist = target_setup(target, vllm)
    for stub in stubs:
        shutil.copy(stub, vllm / stub.name)
    for rel, old, new in edits:
        path = vllm / rel
        text = path.read_text()
        if new not in text:
            assert text.count(old) == 1, f"{rel}: the text to edit is not there once"
            path.write_text(text.replace(old, new))
    dist_info(site, *dist)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:4])
