"""Make the patched fork's vllm/ tree (from make_carry.sh) run on CUDA without its
compiled extensions: stand-in modules from stubs/, three asserted text edits, and
the lvllmds4-x dist-info the platform probe reads.

Usage: prepare_fork.py FORKDIR SITEDIR   (then put FORKDIR and SITEDIR on PYTHONPATH)"""

import shutil
import sys
from pathlib import Path

NO_FUSION_PASSES = (
    "    except (ImportError, AttributeError):  # ds4x GPU harness: no compiled _C ops\n"
)
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
    *((f"v1/worker/gpu/spec_decode/{drafter}/utils.py",
       "    from vllm.compilation.backends import set_model_tag\n",
       "    try:\n"
       "        from vllm.compilation.backends import set_model_tag\n" + NO_FUSION_PASSES +
       "        import contextlib\n\n"
       "        def set_model_tag(tag, is_encoder=False):\n"
       "            return contextlib.nullcontext()\n") for drafter in ("eagle", "dflash")),
]


def main(fork: Path, site: Path) -> None:
    vllm = fork / "vllm"
    for stub in (Path(__file__).parent / "stubs").glob("*.py"):
        shutil.copy(stub, vllm / stub.name)
    for rel, old, new in EDITS:
        path = vllm / rel
        text = path.read_text()
        if new not in text:
            assert text.count(old) == 1, f"{rel}: the text to edit is not there once"
            path.write_text(text.replace(old, new))
    info = site / "lvllmds4_x-0.23.1.dev0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lvllmds4-x\nVersion: 0.23.1.dev0+gb7f99cd.cu130\n")
    (info / "RECORD").write_text("lvllmds4_x-0.23.1.dev0.dist-info/METADATA,,\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
