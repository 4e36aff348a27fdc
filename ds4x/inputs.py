"""What the user hands us, checked before any work: the one reader for text
files (pins.toml, series, patches) and the argparse types of the CLI. Each
refusal is one line naming the input and the fix (InputError, exit 2)."""

from __future__ import annotations

import argparse
import os
import re
import urllib.parse
import zipfile
from pathlib import Path

from ds4x.errors import InputError
from vllm_ds4x import out_paths

MAX_TEXT_BYTES = 64 * 2**20  # far above any pin file, series or patch; a cap so /dev/zero cannot fill memory
_SHOWN = 60  # longer values are cut in messages
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shown(value: object, limit: int = _SHOWN) -> str:
    """A value as Python writes it, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def read_text(path: Path, what: str = "", limit: int = MAX_TEXT_BYTES) -> str:
    """A UTF-8 text file of at most `limit` bytes without NUL bytes; `what`
    (e.g. "--pins ") prefixes the file in messages."""
    where = f"{what}{path}"
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{where}: not found", "give the path of an existing file") from None
    except IsADirectoryError:
        raise InputError(f"{where}: a folder, not a file", "give the path of the file") from None
    except OSError as e:
        raise InputError(f"{where}: {e.strerror}", "give a file you can read") from None
    if len(data) > limit:
        raise InputError(f"{where}: larger than {limit // 2**20} MiB", "give the right file") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise InputError(f"{where}:{_line(data, nul)}: a NUL byte", "save it as UTF-8 text, without NUL")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{where}:{_line(data, e.start)}: byte 0x{data[e.start]:02x} is not UTF-8",
                         "save the file as UTF-8") from None


def not_utf8(text: str) -> str | None:
    """`text` shown with its bytes that are not UTF-8 escaped (Python hands such bytes over as lone
    surrogates, which no message, file or git header can hold); None when it is all UTF-8."""
    if not any("\udc80" <= c <= "\udcff" for c in text):
        return None
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def check_utf8(argv: list[str]) -> None:
    """Every command-line argument valid UTF-8."""
    for i, arg in enumerate(argv):
        if (escaped := not_utf8(arg)) is not None:
            option = f" (of {argv[i - 1]})" if i and argv[i - 1].startswith("-") else ""
            text = CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", escaped)
            raise InputError(f"argument '{text[:_SHOWN]}'{option}: not valid UTF-8",
                             "rename the file, or give the argument in UTF-8")


def environ(name: str) -> str | None:
    """An environment variable the tool reads (a path, a URL, mirrors): None when
    unset or empty; refused when it is not valid UTF-8 or holds control characters
    other than the spaces, tabs and newlines that separate DS4X_MIRRORS' pairs."""
    value = os.environ.get(name)
    if not value:
        return None
    if (text := not_utf8(value)) is not None:
        raise InputError(f"${name} {shown(text)}: not valid UTF-8", f"set {name} in UTF-8, or unset it")
    bad = CONTROL.search(value.replace("\t", " ").replace("\n", " ") if name.endswith("MIRRORS") else value)
    if bad:
        raise InputError(f"${name} {shown(value)}: holds the control character {bad[0]!r}",
                         f"set {name} without it, or unset it")
    return value


def _line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


# ---- argparse types: each raises ArgumentTypeError, which argparse prints
# with the option's name and exits 2, before any command runs


def _bad(text: str, why: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{shown(text, 160)}: {why}")


def plain_value(text: str) -> str:
    """A version or commit: not empty, no spaces or control characters."""
    if not text or len(text) > 100 or text.strip() != text or any(c.isspace() for c in text) or CONTROL.search(text):
        raise _bad(text, "expected a version (e.g. 0.33.0) or a commit id, without spaces")
    return text


def text_value(text: str) -> str:
    """A name or path that goes into a script or header: not empty, no control characters."""
    if not text or len(text) > 4096 or CONTROL.search(text):
        raise _bad(text, "expected a name or path, not empty, without control characters")
    return text


def existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        why = "is a folder" if path.is_dir() else "not a regular file (a pipe or a device)" if path.exists() else "no such file"
        raise _bad(text, f"{why}; give a file")
    return path


def library(text: str) -> str:
    """doctor --preload: a library name the loader looks up (libcudart.so.13), or the path of a file."""
    if not text or CONTROL.search(text):
        raise _bad(text, "expected a library name or path, e.g. libcudart.so.13")
    if "/" in text:
        existing_file(text)
    return text


def existing_folder(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise _bad(text, "is not a folder" if path.exists() else "no such folder")
    return path


def output_folder(text: str) -> Path:
    """A folder to write into: an existing one, or one that can be made (out_paths.unfit_folder)."""
    path = Path(text)
    why = out_paths.unfit_folder(path)
    if why:
        raise _bad(text, why)
    return path


def output_file(text: str) -> Path:
    """A file to write: nothing there yet, or a regular file (refused later unless --force), in an
    existing folder that a probe's file can be made in (out_paths.unfit_file)."""
    path = Path(text)
    why = out_paths.unfit_file(path)
    if why:
        raise _bad(text, why)
    return path


KERNELS_WHEEL = "wheel:"  # --kernels wheel:PATH_OR_URL
KERNELS_RELEASE = "release:"  # --kernels release:TAG, a release pins.toml names (kernels-releases)
# A release tag as pins.toml and --kernels release: take it: one URL path segment, no "..".
RELEASE_TAG = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def kernels(text: str) -> str:
    """`source`, `release:TAG`, `wheel:URL` (`#sha256=HEX` pins its file), or
    `wheel:PATH` of a wheel file (its name and zip checked)."""
    if text == "source":
        return text
    if text.startswith(KERNELS_RELEASE):
        tag = text.removeprefix(KERNELS_RELEASE)
        if not tag:
            raise _bad(text, "expected release:TAG, the tag of a release pins.toml names (kernels-releases)")
        if not RELEASE_TAG.fullmatch(tag):
            raise _bad(text, "a release tag is letters, digits, '.', '_', '+' and '-' (no '..'), at most 100")
        return text
    where = text.removeprefix(KERNELS_WHEEL)
    if where == text or not where:
        raise _bad(text, "expected source, release:TAG or wheel:PATH_OR_URL")
    if "://" in where:
        if CONTROL.search(where) or " " in where:
            raise _bad(text, "the URL holds spaces or control characters")
        url, sep, fragment = where.partition("#")
        if sep and not re.fullmatch(r"sha256=[0-9a-fA-F]{64}", fragment):
            raise _bad(text, "after the URL, expected #sha256= and the wheel's 64 hex digits, or nothing")
        if not is_wheel_name(url_file_name(url)):
            raise _bad(text, "the URL does not end in a wheel's file name (name-version-tags.whl)")
        return text
    try:
        check_wheel(Path(where))
    except InputError as e:
        raise argparse.ArgumentTypeError(f"{e}; {e.hint}") from None
    return text


def url_file_name(url: str) -> str:
    """The file name a URL's path ends in, %-decoded (`%2B` is `+`) before the last
    `/` is found, so that an encoded `/` cannot make it a path."""
    return Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)).name


def is_wheel_name(name: str) -> bool:
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename:
        return False
    return True


def check_wheel(path: Path, what: str = "") -> None:
    """A wheel by its name (name-version-...-tag.whl) and its zip (a .dist-info/WHEEL)."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    where = f"{what}{path}"
    if not path.is_file():
        raise InputError(f"{where}: no such file", "give the path or URL of a .whl")
    try:
        parse_wheel_filename(path.name)
        with zipfile.ZipFile(path) as zf:
            if not any(n.count("/") == 1 and n.endswith(".dist-info/WHEEL") for n in zf.namelist()):
                raise zipfile.BadZipFile("no .dist-info/WHEEL in it")
    except InvalidWheelFilename:
        raise InputError(f"{where}: not a wheel's file name", "give a .whl named name-version-tags.whl") from None
    except (zipfile.BadZipFile, OSError) as e:
        raise InputError(f"{where}: not a wheel ({str(e)[:80]})", "give a release wheel (.whl) of the fork") from None
