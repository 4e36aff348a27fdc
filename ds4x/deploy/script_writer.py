"""`plan --check-launch SCRIPT --write OUT`: the user's script with only what the
check flags changed, in place, each change under a comment that says why;
everything else (comments, order, quoting) as the user wrote it."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from ds4x.deploy import wrap
from ds4x.deploy.script_reader import Fix, Launch, json_object

MARK = "# plan --check-launch --write:"


@dataclass(frozen=True, order=True)
class Edit:
    """text[start:end] becomes `text`."""

    start: int
    end: int
    text: str


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _comment(line: int, what: str, why: str) -> Edit:
    return Edit(line, line, wrap.comment(f"{what}: {why}", MARK))


def _env_edits(launch: Launch, fix: Fix) -> list[Edit]:
    value = shlex.quote(_shown(fix.value))
    slot = launch.env_slots.get(fix.option)
    if slot:
        return [_comment(slot.line_start, f"{fix.option}={value}", fix.why),
                Edit(slot.start, slot.end, slot.prefix + value)]
    line = launch.command_line
    return [_comment(line, f"added {fix.option}", fix.why), Edit(line, line, f"export {fix.option}={value}\n")]


def _option_edits(launch: Launch, fix: Fix) -> list[Edit]:
    slots, option, key = launch.option_slots, fix.option, fix.key
    what = f"{option}.{key} {_shown(fix.value)}" if key else f"{option} {_shown(fix.value)}"
    if (option, key) in slots:
        slot, value = slots[option, key], _shown(fix.value)
    elif key and (option, "") in slots:
        slot, value = slots[option, ""], json.dumps({**json_object(launch.options.get(option)), key: fix.value})
    else:
        dotted = key and any(o == option for o, _ in slots)
        name = f"{option}.{key}" if dotted else option
        value = _shown(fix.value) if dotted or not key else json.dumps({key: fix.value})
        at = launch.insert_at
        return [_comment(launch.command_line, f"added {what}", fix.why), Edit(at, at, f" {name} {shlex.quote(value)}")]
    return [_comment(slot.line_start, what, fix.why), Edit(slot.start, slot.end, slot.prefix + shlex.quote(value))]


def written(launch: Launch, fixes: list[Fix]) -> str:
    """The script's text with `fixes` made: values replaced where the user set
    them, added beside the command where not; a comment above each."""
    edits = [e for fix in fixes for e in (_option_edits if fix.option.startswith("--") else _env_edits)(launch, fix)]
    text = launch.text
    order = sorted(range(len(edits)), key=lambda i: (edits[i].start, edits[i].end, i), reverse=True)
    for edit in (edits[i] for i in order):  # last first, so edits at one place keep their order
        text = text[:edit.start] + edit.text + text[edit.end:]
    return text
