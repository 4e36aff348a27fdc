"""script_reader reads a serving script as bash and vLLM's parser would: one script
per argument form, and the kind of script the fork's users post, checked with no
false warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds4x.cli import main
from ds4x.deploy import script_reader
from tests.serve_script import SPEC, USERS


def read(text: str) -> script_reader.Launch:
    return script_reader.read(text)


@pytest.mark.parametrize("text", [
    "vllm serve m --compilation_config.cudagraph_mode FULL_DECODE_ONLY",
    "vllm serve m --compilation-config.cudagraph_mode=FULL_DECODE_ONLY",
    "vllm serve m --compilation-config '{\"cudagraph_mode\": \"FULL_DECODE_ONLY\"}'",
    "vllm serve m --compilation_config='{\"cudagraph_mode\": \"FULL_DECODE_ONLY\"}'",
    "vllm serve m \\\n  --compilation-config.cudagraph_mode \\\n  FULL_DECODE_ONLY  \n",
])
def test_each_form_of_an_option_reads_the_same(text: str) -> None:
    options = read(text).options
    assert json.loads(options["--compilation-config"]) == {"cudagraph_mode": "FULL_DECODE_ONLY"}


def test_dotted_keys_merge_and_take_json_values() -> None:
    options = read("vllm serve m --speculative_config.method dspark --speculative-config.num_speculative_tokens 2").options
    assert json.loads(options["--speculative-config"]) == {"method": "dspark", "num_speculative_tokens": 2}


def test_underscores_equals_and_flags() -> None:
    options = read("vllm serve --trust-remote-code m --max_model_len=4096 --enforce-eager --port 8000").options
    assert options == {"--trust-remote-code": "", "--max-model-len": "4096", "--enforce-eager": "", "--port": "8000"}


@pytest.mark.parametrize(("text", "env"), [
    ("export LK_THREADS=12\nvllm serve m", {"LK_THREADS": "12"}),
    ("LK_THREADS=12\nvllm serve m", {"LK_THREADS": "12"}),
    ("LK_THREADS=12 OMP_NUM_THREADS=6 vllm serve m", {"LK_THREADS": "12", "OMP_NUM_THREADS": "6"}),
    ("export A=1 B='x y'; exec vllm serve m", {"A": "1", "B": "x y"}),
])
def test_each_form_of_a_variable(text: str, env: dict[str, str]) -> None:
    launch = read(text)
    assert launch.env == env and launch.insert_at == text.index(" m") + 2


def test_comments_and_quotes_are_bash_s() -> None:
    launch = read("# don't read me: --port 1\nvllm serve m --port 2 # --port 3\n  --served-model-name 'a # b'\n")
    assert launch.options == {"--port": "2"}  # a comment ends the command: the next line is another one
    assert read("vllm serve m --served-model-name \"a \\\" # b\"").options == {"--served-model-name": 'a " # b'}


def test_an_args_array_is_spliced() -> None:
    options = read('args=(\n  --port 8000  # why\n  --max-model-len 4096\n)\nexec vllm serve m "${args[@]}" "$@"\n').options
    assert options["--port"] == "8000" and options["--max-model-len"] == "4096"


def test_an_unclosed_quote_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "bad.sh"
    script.write_text("vllm serve m --speculative-config '{\n")
    assert main(["plan", "--check-launch", str(script)]) == 2
    assert "is not closed" in capsys.readouterr().err


def test_the_users_script_has_no_false_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "serve.sh"
    script.write_text(USERS.format(threads=1, spec=SPEC))
    launch = script_reader.read(script.read_text())
    assert launch.env["LK_THREAD_BINDING"] == "CPU_CORE" and launch.env["OMP_NUM_THREADS"] == "12"
    assert launch.options["--default-chat-template-kwargs"] == '{"thinking": true}'
    main(["plan", "--check-launch", str(script)])
    out = capsys.readouterr().out
    assert "cudagraph_mode" not in out, out


def test_a_script_without_vllm_serve_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "other.sh"
    script.write_text("export LK_THREADS=1\necho vllm serve m  # not the command\n")
    assert main(["plan", "--check-launch", str(script)]) == 2
    assert "no `vllm serve` command in it" in capsys.readouterr().err
