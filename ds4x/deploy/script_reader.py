"""A serving script read as bash and vLLM would read it: the variables set before
`vllm serve` (exports, assignments, `VAR=... vllm serve`) and its options in every
form vLLM's parser takes (dotted `--section.key`, dashes or underscores, `--opt=value`,
JSON values), each with where it sits in the text so that `--write` can change it."""

from __future__ import annotations

import importlib
import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Annotated, Any

from vllm_ds4x import bounded

_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_OPERATORS = ";&|()"
FLAGS = frozenset({"--trust-remote-code", "--enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching",
                   "--enable-auto-tool-choice", "--disable-log-requests", "--disable-log-stats", "--enable-chunked-prefill",
                   "--enable-expert-parallel", "--async-scheduling", "--headless"})
"""options that take no value: the word after them is not theirs"""


class ScriptError(ValueError):
    """A script the reader cannot split as bash would (an unclosed quote)."""


@dataclass(frozen=True)
class Word:
    """One shell word (quotes removed) or operator, and its span in the text."""

    text: str
    start: int
    end: int
    operator: bool = False


@dataclass(frozen=True)
class Slot:
    """Where a value sits: text[start:end] becomes `prefix` + the new value, quoted."""

    start: int
    end: int
    prefix: str
    line_start: int  # of the command that holds it: a comment saying why goes above


@dataclass(frozen=True)
class Fix:
    """A change --write makes: `option` (or, for a variable, its name) set to
    `value`; with `key`, that key of the option's JSON object."""

    option: str
    key: str
    value: Any
    why: str


@dataclass
class Launch:
    """What a script sets: env and canonical `--dashed-option` values (dotted
    parts merged into one JSON object), with their slots."""

    env: dict[str, str] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)
    env_slots: dict[str, Slot] = field(default_factory=dict)
    option_slots: dict[tuple[str, str], Slot] = field(default_factory=dict)  # (option, "" or dotted key)
    insert_at: int = -1  # after the model (or `serve`): where a new option goes
    command_line: int = 0  # start of the `vllm serve` command's first line
    argv: list[str] = field(default_factory=list)  # after `vllm serve`, as bash passes them
    text: str = ""
    problems: list[str] = field(default_factory=list)
    """where bash reads the script otherwise than this reader could (CR LF, a backslash
    before spaces at a line's end, an expansion it does not follow): --check-launch errors"""


_SPACED_CONTINUATION = re.compile(r"\\[ \t]+(?=\r?\n)")
"""a backslash with spaces after it at a line's end: bash escapes the space and ends the command"""


def words(text: str, spaced: list[int] | None = None) -> list[Word]:
    """Bash's words and operators (newline is `;`), comments and line continuations dropped;
    `spaced` gets the offset of every backslash that spaces follow at a line's end."""
    out: list[Word] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("\\\n", i) or c in " \t\r":
            i += 2 if c == "\\" else 1
        elif c == "#":
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
        elif c == "\n" or c in _OPERATORS:
            out.append(Word(";" if c == "\n" else c, i, i + 1, operator=True))
            i += 1
        else:
            out.append(_word(text, i, spaced))
            i = out[-1].end
    return out


def _word(text: str, i: int, spaced: list[int] | None = None) -> Word:
    """The word starting at i: quotes and escapes as bash reads them."""
    start, parts, n = i, [], len(text)
    while i < n and text[i] not in " \t\r\n" + _OPERATORS:
        c = text[i]
        if c == "'":
            close = text.find("'", i + 1)
            if close < 0:
                raise ScriptError(f"a ' opened at offset {i} is not closed")
            parts.append(text[i + 1:close])
            i = close + 1
        elif c == '"':
            i = _double_quoted(text, i + 1, parts)
        elif c == "\\":
            if text.startswith("\\\n", i):
                i += 2
                continue
            if spaced is not None and _SPACED_CONTINUATION.match(text, i):
                spaced.append(i)
            parts.append(text[i + 1:i + 2])
            i += 2
        else:
            parts.append(c)
            i += 1
    return Word("".join(parts), start, i)


def _double_quoted(text: str, i: int, parts: list[str]) -> int:
    """Appends a "..." body (from after its quote) to parts; returns the index after the closing quote."""
    while i < len(text):
        c = text[i]
        if c == '"':
            return i + 1
        if c == "\\" and text[i + 1:i + 2] in ('"', "\\", "$", "`", "\n"):
            parts.append("" if text[i + 1] == "\n" else text[i + 1])
            i += 2
        else:
            parts.append(c)
            i += 1
    raise ScriptError('a " is not closed')


def commands(all_words: list[Word]) -> list[list[Word]]:
    """Simple commands, split at ; & | newlines; `NAME=( ... )` arrays kept in one command."""
    out: list[list[Word]] = [[]]
    depth = 0
    for w in all_words:
        if w.operator and w.text == "(" and out[-1] and out[-1][-1].text.endswith("="):
            depth += 1
        elif w.operator and w.text == ")" and depth:
            depth -= 1
        elif w.operator and not depth:
            out.append([])
            continue
        elif w.operator:
            continue  # a newline inside an array
        out[-1].append(w)
    return [c for c in out if c]


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


_ARRAY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_DECLARE = ("declare", "typeset")
_EXPANSION = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?\}|([A-Za-z_][A-Za-z0-9_]*))|\$[^@*]")
"""$NAME, ${NAME}, ${NAME[@]}; or a `$` this reader does not follow ($(...), $1, ${NAME:-x}, ...)"""
_PASSED_ON = ('"$@"', '"$*"', "$@", "$*")  # the script's own arguments, passed through: not this script's settings


def read(text: str) -> Launch:
    """The script's env and `vllm serve` options; raises ScriptError. What bash would read
    otherwise (CR LF, a backslash before spaces at a line's end, an expansion not followed)
    goes to `problems`."""
    launch = Launch(text=text)
    if "\r\n" in text:
        launch.problems.append(f"line {_line_of(text, text.index(chr(13) + chr(10)))}: CR LF line endings (Windows): "
                               f"bash reads each CR as part of the line's last word; save the script with LF "
                               f"endings (e.g. dos2unix)")
    spaced: list[int] = []
    arrays: dict[str, list[Word]] = {}
    for command in commands(words(text, spaced)):
        line = text.rfind("\n", 0, command[0].start) + 1
        if command[0].text == "export" or _declares_export(command):
            _assignments(launch, [w for w in command[1:] if not w.text.startswith(("-", "+"))], line)
            continue
        head = 0
        while head < len(command) and _ASSIGN.match(command[head].text):
            head += 1
        array = _ARRAY.fullmatch(command[0].text)
        if array and len(command) > 1 and head <= 1:  # NAME=( ... ) or NAME+=( ... )
            given = _spliced(launch, [w for w in command[1:] if not w.operator], arrays)
            arrays[array[1]] = (arrays.get(array[1], []) if array[2] else []) + given
            continue
        _assignments(launch, command[:head], line)
        rest = [w for w in command[head:] if w.text != "exec"]
        if len(rest) >= 2 and rest[0].text.rsplit("/", 1)[-1] == "vllm" and rest[1].text == "serve":
            launch.command_line = line
            _serve(launch, _spliced(launch, rest[2:], arrays), rest[1].end, line)
    launch.problems += [f"line {_line_of(text, at)}: a backslash with spaces after it ends the line: bash escapes "
                        f"the space and ends the command there, so the next line runs as a command of its own; "
                        f"remove the spaces after the backslash" for at in spaced]
    return launch


def _declares_export(command: list[Word]) -> bool:
    """`declare -x NAME=...` (or -rx, typeset -x): an export."""
    return command[0].text in _DECLARE and any(w.text.startswith("-") and "x" in w.text for w in command[1:])


def _assignments(launch: Launch, assigns: list[Word], line: int) -> None:
    for w in assigns:
        match = _ASSIGN.match(w.text)
        if match:
            name = match.group(1)
            launch.env[name] = w.text[match.end():]
            launch.env_slots[name] = Slot(w.start, w.end, f"{name}=", line)


def _spliced(launch: Launch, args: list[Word], arrays: dict[str, list[Word]]) -> list[Word]:
    """`"${NAME[@]}"` replaced by the array's words, `$NAME` by a variable the script set;
    any other expansion (an array never built here, `$(...)`, `${NAME:-x}`) is a problem:
    the check says plainly that it did not follow it."""
    out: list[Word] = []
    for w in args:
        found = list(_EXPANSION.finditer(w.text))
        if not found or w.text in _PASSED_ON:
            out.append(w)
            continue
        whole = found[0] if len(found) == 1 and found[0].span() == (0, len(w.text)) else None
        name, index = (whole[1] or whole[3], whole[2]) if whole else (None, None)
        if name and index and name in arrays:
            out += arrays[name]
        elif name and not index and name in arrays:
            out += arrays[name][:1]  # $NAME of an array: its first word, as bash reads it
        elif name and not index and name in launch.env and not _EXPANSION.search(launch.env[name]):
            out.append(Word(launch.env[name], w.start, w.end))
        else:
            launch.problems.append(f"`vllm serve` argument {w.text[:60]!r}: an expansion this check does not "
                                   f"follow (only arrays NAME=(...)/NAME+=(...) and variables set in the script); "
                                   f"write the values into the script, or check the command it runs")
            out.append(w)
    return out


def canonical(name: str) -> tuple[str, str]:
    """`--compilation_config.cudagraph_mode` -> ("--compilation-config", "cudagraph_mode")."""
    section, _, key = name[2:].partition(".")
    return "--" + section.replace("_", "-"), key


def _serve(launch: Launch, args: list[Word], serve_end: int, line: int) -> None:
    launch.insert_at, launch.argv = serve_end, [w.text for w in args]
    dotted: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(args):
        w = args[i]
        if not w.text.startswith("--"):
            if i == 0:
                launch.insert_at = w.end  # the model
            i += 1
            continue
        raw, eq, value = w.text.partition("=")
        option, key = canonical(raw)
        slot = Slot(w.start, w.end, raw + "=", line) if eq else None
        if not eq:
            following = args[i + 1] if i + 1 < len(args) else None
            takes = following is not None and option not in FLAGS and not following.text.startswith("--")
            value = following.text if takes and following else ""
            slot = Slot(following.start, following.end, "", line) if takes and following else None
            i += 1 if takes else 0
        if slot:
            launch.option_slots[(option, key)] = slot
        if key:
            _nest(dotted.setdefault(option, {}), key.split("."), json_or_text(value))
        else:
            launch.options[option] = value
        i += 1
    for option, keys in dotted.items():  # vLLM passes the dotted keys last, as one object: it replaces the option's
        launch.options[option] = json.dumps(keys)


def _nest(into: dict[str, Any], keys: list[str], value: Any) -> None:
    """`--opt.a.b.c value` as vLLM's parser nests it: {"a": {"b": {"c": value}}}, merged into what the
    earlier dotted keys of the option made (objects merged key by key, lists joined, the rest replaced)."""
    for key in keys[:-1]:
        if not isinstance(into.get(key), dict):
            into[key] = {}
        into = into[key]
    last = keys[-1]
    if isinstance(value, dict) and isinstance(into.get(last), dict):
        for k, v in value.items():
            _nest(into[last], [k], v)
    elif isinstance(value, list) and isinstance(into.get(last), list):
        into[last] = into[last] + value
    else:
        into[last] = value


def json_or_text(value: str) -> Any:
    """An option's value as vLLM reads it: JSON where it parses (bounded in depth, numbers finite), else the text."""
    try:
        return bounded.loads(value)
    except bounded.BoundError:
        return value


def json_object(raw: str | None) -> dict[str, Any]:
    """An option's JSON object; {} when unset or not an object."""
    value = json_or_text(raw) if raw else {}
    return value if isinstance(value, dict) else {}


# where `vllm serve`'s parser is made: the fork's (and older vLLM's), then upstream's (0.32.0 and later)
PARSER_MODULES = ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args")


def vllm_parser() -> Any:
    """`vllm serve`'s own argument parser, or None where vLLM is not importable in this Python."""
    for name in PARSER_MODULES:
        try:
            make_arg_parser = importlib.import_module(name).make_arg_parser
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except (ImportError, AttributeError):
            continue
        return make_arg_parser(FlexibleArgumentParser())
    return None


def with_vllm_parser(launch: Launch) -> Launch:
    """The option values as the patched vLLM's own parser reads them, where vLLM
    is importable in this Python (else the reader's, which follow its rules)."""
    parser = vllm_parser()
    if parser is None:
        return launch
    try:
        parsed = parser.parse_args(launch.argv)
    except SystemExit:
        raise ScriptError("vLLM's own parser refuses the `vllm serve` arguments (its message is above)") from None
    for option in launch.options:
        value = getattr(parsed, option[2:].replace("-", "_"), None)
        if isinstance(value, dict):
            launch.options[option] = json.dumps(value)
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            launch.options[option] = str(value)
    return launch


def _vllm_field_problem(cls: Any, name: str, value: object) -> str | None:
    """What vLLM's pydantic field `name` of the config class `cls` says of `value` (None: it takes it)."""
    import pydantic

    fields = cls.__pydantic_fields__
    if name not in fields:
        return f"{name}: not a field of vLLM's {cls.__name__} (known: {', '.join(sorted(fields)[:12])}, ...)"
    info = fields[name]
    try:
        pydantic.TypeAdapter(Annotated[info.annotation, info]).validate_python(value)
    except pydantic.ValidationError as e:
        said = e.errors()[0]["msg"] if e.errors() else str(e)
        return f"{name}={str(value)[:40]!r}: vLLM's {cls.__name__} refuses it: {said}"
    return None


def vllm_config_problems(options: dict[str, str]) -> list[str]:
    """--speculative-config as the patched vLLM's own SpeculativeConfig checks it (each
    field by its declared type and range, draft_depth by the overlay's parser as its
    __post_init__ calls it), where vLLM is importable in this Python; [] elsewhere.
    (vLLM's parser, with_vllm_parser, already builds --compilation-config's class whole;
    SpeculativeConfig it leaves a dict, built with the model.)"""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydantic's notes on vLLM's field declarations
            from vllm.config import SpeculativeConfig

            from vllm_ds4x.depth.policy import DraftDepthConfig
    except ImportError:
        return []
    problems = []
    spec = json_object(options.get("--speculative-config"))
    for name, value in spec.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            why = _vllm_field_problem(SpeculativeConfig, name, value)
        if why:
            problems.append(f"--speculative-config {why}")
    k = spec.get("num_speculative_tokens")
    if isinstance(spec.get("draft_depth"), dict) and isinstance(k, int) and not problems:
        try:
            DraftDepthConfig.from_dict(spec["draft_depth"], k)
        except ValueError as e:
            problems.append(f"--speculative-config draft_depth: the engine's parser refuses it: {str(e)[:300]}")
    return problems
