"""ds4x.build.pins: the repository's pins load exact, and bad pins are refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds4x.build import pins
from ds4x.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
GOOD_SHA = "b7f99cdc16cb77af8ff5062817dcbb0f9db481ad"


def test_repository_pins_load_and_are_exact() -> None:
    loaded = pins.load(ROOT / "pins.toml")
    assert sorted(loaded.targets) == ["flashinfer", "lvllmds4-x", "vllm", "vllm-cpu-engine"]
    assert [t.name for t in loaded.defaults] == ["lvllmds4-x", "flashinfer"]
    vllm, engine = loaded.get("vllm"), loaded.get("vllm-cpu-engine")
    # rolled to 0.34.0 without a vLLM mirror: the sdist's sha256 pins it, its own commit id is recorded on build;
    # no vllm-cpu 0.34.0 exists, so the CPU engine stays on 0.32.0 with the kernels wheel of that release
    assert vllm.sdist and vllm.sdist.version == "0.34.0" and vllm.git is None and vllm.kernels_wheel is None
    assert engine.sdist and engine.kernels_wheel and engine.sdist.version == engine.kernels_wheel.version == "0.32.0"
    assert vllm.sources == engine.sources == ("sdist",)
    assert loaded.get("flashinfer").sources == ("wheel",)
    assert loaded.get("lvllmds4-x").kernel_sources == ("csrc", "CMakeLists.txt", "cmake")


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pins.toml"
    path.write_text(body)
    return path


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (f'[targets.x]\npackage="x"\ngit={{url="u", commit="{GOOD_SHA[:12]}"}}\n',
         "targets.x.git.commit: 'b7f99cdc16cb' is not a full 40-hex commit"),
        ('[targets.x]\npackage="x"\nwheel={project="p", version="1", filename="f.whl", sha256="abc"}\n',
         "targets.x.wheel.sha256: 'abc' is not a sha256 digest"),
        (f'[targets.x]\npackage="x"\ncolour="red"\ngit={{url="u", commit="{GOOD_SHA}"}}\n',
         "targets.x: unknown keys ['colour']"),
        ('[targets.x]\npackage="x"\n', "targets.x: no source"),
        (f'[targets.x]\ngit={{url="u", commit="{GOOD_SHA}"}}\n', "targets.x: missing 'package'"),
        (f'[targets.x]\npackage="x"\ngit={{url="u", commit="{GOOD_SHA}", branch="main"}}\n',
         "targets.x.git: unknown keys ['branch'], missing keys []"),
        ("[targets.x\n", "Expected ']' at the end of a table declaration (at line 1, column 11)"),
        (f'[targets.x]\npackage="x"\ngit={{url="u", commit="{GOOD_SHA.upper()}"}}\n',
         f"targets.x.git.commit: '{GOOD_SHA.upper()}' is in upper case"),
    ],
)
def test_bad_pins_are_refused_by_name(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(InputError) as caught:
        pins.load(path)
    assert str(caught.value) == f"{path}: {message}"
    assert caught.value.exit_code == 2


def test_unknown_target_lists_known_ones() -> None:
    loaded = pins.load(ROOT / "pins.toml")
    with pytest.raises(InputError) as caught:
        loaded.get("vllm-rocm")
    assert str(caught.value) == "unknown target 'vllm-rocm'"
    assert caught.value.hint == "choose one of: flashinfer, lvllmds4-x, vllm, vllm-cpu-engine"


def test_missing_pins_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="pins.toml: not found"):
        pins.load(tmp_path / "pins.toml")
