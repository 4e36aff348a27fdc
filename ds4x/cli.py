"""The command line: the only module that prints errors or exits."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ds4x import __version__, inputs, log
from ds4x.build import pins, words
from ds4x.checkout import HOME, Checkout, Layout
from ds4x.errors import (
    EXIT_BAD_INPUT,
    EXIT_BUG,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Ds4xError,
    InputError,
    Terminated,
)
from ds4x.log import logger
from ds4x.scratch import atomic_write
from vllm_ds4x import out_paths

if TYPE_CHECKING:
    from ds4x.build import sources

# Build commands import GitPython, packaging and wheel on use, so that `doctor`
# and `provenance` run with any deployment Python, where only vLLM is installed.

LIGHT_COMMANDS = ("doctor", "provenance", "plan")


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more output (git commands)")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    parser.add_argument("--pins", type=inputs.existing_file, default=HOME.pins, help="pins file (default: %(default)s)")
    parser.add_argument("--cache-dir", type=inputs.output_folder, default=None, help="cache (default: $DS4X_CACHE_DIR or XDG cache/ds4x)")
    parser.add_argument(
        "--mirror", action="append", default=[], metavar="URL=URL_OR_PATH",
        help="fetch URL from elsewhere (repeatable; also $DS4X_MIRRORS, whitespace-separated)",
    )
    parser.add_argument("--offline", action="store_true", help="use only what is in the cache")
    parser.add_argument("--source", choices=pins.SOURCE_KINDS, help="base source for targets that pin several")


def _targets(parser: argparse.ArgumentParser, help_default: str) -> None:
    parser.add_argument("--target", "-t", action="append", default=[], help=f"target name (repeatable; default: {help_default})")


def _settings(args: argparse.Namespace) -> sources.Settings:
    from ds4x.build import sources

    return sources.Settings(
        cache=args.cache_dir or sources.default_cache(),
        mirrors=sources.parse_mirrors(args.mirror),
        offline=args.offline,
        source=args.source,
    )


def _checkout(args: argparse.Namespace) -> Checkout:
    """Everything a build command reads or writes by default is beside the pins file."""
    return Checkout(pins=args.pins)


def _work_dir(args: argparse.Namespace, target: pins.Target) -> Path:
    return Path(args.dir) if args.dir else _checkout(args).trees / target.name


def _chosen(args: argparse.Namespace, all_by_default: bool = False) -> list[pins.Target]:
    loaded = pins.load(args.pins)
    if args.target:
        return [loaded.get(name) for name in args.target]
    return list(loaded.targets.values()) if all_by_default else loaded.defaults


def _one(args: argparse.Namespace) -> pins.Target:
    if len(args.target) != 1:
        raise InputError(f"{args.command} works on one target", "name it with --target")
    return _chosen(args)[0]


def cmd_fetch(args: argparse.Namespace) -> int:
    from ds4x.build import sources

    for target in _chosen(args):
        base = sources.fetch(target, _settings(args))
        print(f"{target.name}: {base.repo} @ {base.commit}")
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    from ds4x.build import sources, workspace

    target = _one(args)
    dest = _work_dir(args, target)
    base = sources.fetch(target, _settings(args))
    with log.step(f"apply {target.name} series into {dest}"):
        workspace.materialize(base, dest, _checkout(args).layout)
    print(f"{dest}: edit, commit, then `build.py refresh --target {target.name}`")
    return 0


def cmd_refresh(args: argparse.Namespace) -> int:
    from ds4x.build import workspace

    target = _one(args)
    tree = _work_dir(args, target)
    names = workspace.refresh(tree, _checkout(args).layout, target.name)
    print(f"{_checkout(args).layout.series(target.name)}: {len(names)} patches")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Upstream-ready format-patch files (numbered, with diffstat) or one mbox."""
    from ds4x.build import export, series, sources

    target = _one(args)
    author = export.author_of(args.author)  # before any download: it may be missing
    out = args.output or _checkout(args).dist / "patches" / target.name
    layout = _checkout(args).layout
    why = None if args.mbox else out_paths.folder_refusal(
        "--output", out, _read_folders(layout, target.overlays), args.force,
        [export.NUMBERED])
    if why:
        raise InputError(why)
    base = sources.fetch(target, _settings(args))
    texts = export.upstream_texts(base, layout, author)
    if args.mbox:
        with atomic_write(args.mbox) as mbox:
            mbox.write("".join(texts))
        print(f"{args.mbox}: {len(texts)} patches")
        return 0
    names = [f"{number:04d}-{series.file_name(series.subject_of(text))}" for number, text in enumerate(texts, 1)]
    out.mkdir(parents=True, exist_ok=True)
    for stale in set(out.glob(export.NUMBERED)) - {out / name for name in names}:
        stale.unlink()  # an earlier export's, which `git am *.patch` would apply too
    for name, text in zip(names, texts):
        with atomic_write(out / name) as f:
            f.write(text)
    print(f"{out}: {len(texts)} patches")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from ds4x.build import sources, workspace

    if args.newest:
        return _check_newest(args)
    failed = 0
    for target in _chosen(args, all_by_default=True):
        base = sources.fetch(target, _settings(args))
        with log.step(f"check {target.name} @ {base.commit[:12]}"):
            problems = workspace.check(base, _checkout(args).layout).problems
        for problem in problems:
            logger.error("  %s", words.said(problem))
        failed += bool(problems)
        print(f"{target.name}: {'FAILED' if problems else 'ok'}")
    return 1 if failed else 0


def _check_newest(args: argparse.Namespace) -> int:
    """Exits 1 when a series does not apply there, so that a scheduled run fails on drift."""
    from ds4x.build import newest

    _online(args)
    conflicts = 0
    for drift in newest.drifts(_chosen(args, all_by_default=True), _settings(args), _checkout(args).layout):
        print(words.drift_line(drift))
        conflicts += drift.failure is not None
    return 1 if conflicts else 0


def cmd_roll(args: argparse.Namespace) -> int:
    from ds4x.build import roll

    target = _one(args)
    _online(args)
    rolled = roll.run(target, args.to, _settings(args), _checkout(args), args.dir)
    for name, clean in rolled.statuses:
        print(f"  {name}: {words.applies(clean)}")
    print(f"{args.pins}: {target.name} now pins {words.pinned(rolled)}; patches refreshed from {rolled.tree}")
    return 0


def _online(args: argparse.Namespace) -> None:
    if args.offline:
        raise InputError(f"{args.command} reads the package index", "run it without --offline")


def cmd_wheel(args: argparse.Namespace) -> int:
    from ds4x.build import builder, wheel

    targets = _chosen(args)
    if args.kernels and len(targets) != 1:
        raise InputError("--kernels applies to one target", "add --target")
    built = []
    dist = args.dist or _checkout(args).dist
    _check_dist(args, dist)
    try:
        dist.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--dist {dist}: {e.strerror}", "give a folder you can write") from None
    if not os.access(dist, os.W_OK):
        raise InputError(f"--dist {dist}: not writable", "give a folder you can write")
    for target in targets:
        with log.step(f"wheel {target.name}"):
            built.append(builder.build(target, _settings(args), _checkout(args).layout, args.kernels, dist))
    removed = wheel.clear_superseded(dist, built)
    for path in removed:
        logger.warning("removed %s from %s: superseded by this build (dist/ holds one deployment)", path.name, dist)
    constraints = wheel.write_constraints(dist, built, removed)
    for b in built:
        print(f"{b.path}  {b.path.stat().st_size / 2**20:.1f} MiB  sha256:{b.sha256}")
    print(f"install (hash-checked): pip install --no-deps --require-hashes --no-index --find-links {dist} "
          f"-r {constraints}   then, for their dependencies: pip install {dist}/*.whl")
    return 0


def _check_dist(args: argparse.Namespace, dist: Path) -> None:
    """dist/ is written over and superseded wheels in it removed: a folder of our own
    earlier build, an empty one, or --force; never the folder of the --kernels wheel (an input)."""
    from ds4x.build import wheel

    layout = _checkout(args).layout
    kernels = (args.kernels or "").removeprefix(inputs.KERNELS_WHEEL)
    if args.kernels and kernels != args.kernels and "://" not in kernels and Path(kernels).parent.resolve() == dist.resolve():
        raise InputError(f"--dist {dist}: holds the --kernels wheel {kernels}, which this build could remove",
                         "move the wheel out of it, or give another --dist")
    overlays = tuple(sorted({name for target in pins.load(args.pins).targets.values() for name in target.overlays}))
    why = out_paths.folder_refusal("--dist", dist, _read_folders(layout, overlays),
                                   args.force or wheel.made_by_ds4x(dist), ["*.whl", "constraints.txt"])
    if why:
        raise InputError(why)


def cmd_provenance(args: argparse.Namespace) -> int:
    from ds4x.deploy import doctor

    records = doctor.installed_provenance()
    print(json.dumps(records, indent=2, sort_keys=True) if records else "no ds4x wheel is installed here")
    return 0 if records else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from ds4x.deploy import doctor

    print(doctor.report(import_torch=not args.no_torch, libraries=tuple(args.preload)))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from ds4x.deploy import plan
    from ds4x.deploy.planned import PlanCommand

    return plan.main(PlanCommand.of(vars(args)))


Adder = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


class Parser(argparse.ArgumentParser):
    """argparse's, with a usage error as one line and a hint to --help (exit 2), as every other error
    is said; its subcommands' parsers are of this class too (add_subparsers' parser_class)."""

    def error(self, message: str) -> NoReturn:
        where = (f"{self.prog} --help lists the commands, {self.prog} COMMAND --help a command's options"
                 if self._subparsers else f"{self.prog} --help lists the options")
        self.exit(EXIT_BAD_INPUT, f"error: {message}\nhint: {where}\n")


def parser() -> argparse.ArgumentParser:
    top = Parser(prog="build.py", description="ds4x: patched vLLM / Lvllmds4-x / FlashInfer wheels")
    top.add_argument("--version", action="version", version=f"ds4x {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    def add(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        _common(p)
        p.set_defaults(func=func)
        return p

    _build_commands(add)
    _series_commands(add)
    _deployment_commands(add)
    return top


def _build_commands(add: Adder) -> None:
    p = add("wheel", cmd_wheel, "build patched wheels into dist/ with constraints.txt (the main job)")
    _targets(p, "lvllmds4-x and flashinfer")
    p.add_argument("--kernels", type=inputs.kernels, help="source | release:TAG | wheel:PATH_OR_URL (compiled modules to reuse)")
    p.add_argument("--dist", type=inputs.output_folder, help="output folder (default: dist/ beside the pins file)")
    p.add_argument("--force", action="store_true",
                   help="write into a --dist that holds wheels or a constraints.txt of no earlier build (superseded wheels go)")
    _targets(add("fetch", cmd_fetch, "fetch pinned sources into the cache"), "the default targets")
    for name, func, text in (
        ("apply", cmd_apply, "apply a target's series into a development tree"),
        ("refresh", cmd_refresh, "write a development tree's commits back to patches/"),
    ):
        p = add(name, func, text)
        _targets(p, "required")
        dir_type = inputs.output_folder if name == "apply" else inputs.existing_folder
        p.add_argument("--dir", type=dir_type, help="development tree (default: trees/<target>)")


def _series_commands(add: Adder) -> None:
    p = add("export", cmd_export, "write a target's series as upstream-ready format-patch files")
    _targets(p, "required")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--output", type=inputs.output_folder, help="folder (default: dist/patches/<target>)")
    where.add_argument("--mbox", type=inputs.output_file, help="one mbox file instead of a folder")
    p.add_argument("--force", action="store_true",
                   help="write over an existing --mbox file, or into an --output folder that holds numbered patches")
    p.add_argument("--author", metavar="'NAME <EMAIL>'",
                   help="author and Signed-off-by of every patch (default: your git config user.name/user.email)")
    p = add("roll", cmd_roll, "move a target's pin to another release or commit, re-applying the series")
    _targets(p, "required, one")
    p.add_argument("--to", required=True, metavar="VERSION|COMMIT", type=inputs.plain_value,
                   help="the release to pin (sdist and wheel pins; see `check --newest`), or the commit (git-only pins)")
    p.add_argument("--dir", type=inputs.output_folder,
                   help="development tree (default: trees/<target>-<version or commit>)")
    p = add("check", cmd_check, "every patch applies exactly and re-exports byte for byte")
    _targets(p, "all")
    p.add_argument("--newest", action="store_true",
                   help="instead: does the series apply to the newest release on the index? (pins unchanged)")


def _deployment_commands(add: Adder) -> None:
    add("provenance", cmd_provenance, "print the provenance of ds4x wheels installed in this Python")
    p = add("doctor", cmd_doctor, "report libcudart resolution and ds4x provenance for a bug report")
    p.add_argument("--preload", action="append", default=[], metavar="LIB", type=inputs.library,
                   help="load this shared library (a name or a path) first")
    p.add_argument("--no-torch", action="store_true", help="do not import torch first")
    p = add("plan", cmd_plan, "GPU-resident MoE memory plan and decode ceiling from a config.json")
    try:
        from ds4x.deploy import plan

        plan.add_arguments(p)
    except (ImportError, Ds4xError):
        pass  # `plan` then says what is missing when it runs


STANDALONE = ("doctor", "provenance")  # these need only the package


def _read_folders(layout: Layout, overlays: tuple[str, ...]) -> dict[str, Path]:
    """What a build reads, which no output may be inside: the series and each overlay package."""
    return {"the series folder": layout.patches, **{f"the overlay package {name}": layout.overlays / name
                                                    for name in overlays}}


def _check_install(args: argparse.Namespace) -> None:
    """ds4x runs from a checkout: the series beside the pins file (--pins), and for plan the
    examples beside the package."""
    if args.command in STANDALONE:
        return
    if args.command == "plan":
        _check_plan_checkout(args)
        needed = [HOME.examples]
    else:
        needed = [args.pins, _checkout(args).layout.patches]
    missing = [str(path) for path in needed if not path.exists()]
    if missing:
        raise Ds4xError(
            f"{args.command} needs the ds4x checkout; not found: {', '.join(missing)}",
            "run it from a clone of the ds4x repository (python build.py ..., or pip install -e .), or pass --pins",
        )


def _check_plan_checkout(args: argparse.Namespace) -> None:
    """plan computes with the overlay modules and the example of the checkout it
    runs from (its options come from them, before --pins is read): a --pins of
    another checkout would plan with one checkout's overlay and build with another's."""
    if not _checkout(args).same_as(HOME):
        raise InputError(
            f"plan reads the overlay and examples of the checkout it runs from ({HOME.root}); "
            f"--pins {args.pins} is another checkout's, and plan will not mix them",
            f"run that checkout's own `{_checkout(args).root / 'build.py'} plan`, or leave --pins out",
        )


def _check_inputs(args: argparse.Namespace) -> None:
    """What argparse cannot see alone, before any work: the pins file against
    its schema, the cache and mirrors, an output that exists."""
    if args.command in LIGHT_COMMANDS:
        return
    pins.load(args.pins)
    _settings(args)
    why = out_paths.refusal({"--mbox": getattr(args, "mbox", None)}, {"--pins": args.pins}, getattr(args, "force", False))
    if why:
        raise InputError(why)


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    try:
        inputs.check_utf8(given)
    except InputError as e:
        return _said(e)
    args = parser().parse_args(given)
    if threading.current_thread() is not threading.main_thread():  # only the main thread may take signals
        return _run(args)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _run(args: argparse.Namespace) -> int:
    log.setup(-1 if args.quiet else args.verbose)
    try:
        _check_install(args)
        _check_inputs(args)
        if args.command not in LIGHT_COMMANDS:
            from ds4x.build import gitops

            gitops.isolate_environ()
        return int(args.func(args))
    except ImportError as e:
        if "git" in str(e).lower() and not isinstance(e, ModuleNotFoundError):  # GitPython found no git
            print(f"error: git is needed: {str(e).splitlines()[0]}", file=sys.stderr)
            print("hint: install git, or point GIT_PYTHON_GIT_EXECUTABLE at it", file=sys.stderr)
        else:
            print(f"error: a dependency of ds4x is missing: {e}", file=sys.stderr)
            print("hint: install ds4x with its dependencies: pip install -e . (from the checkout)", file=sys.stderr)
        return EXIT_FAILED
    except Ds4xError as e:
        return _said(e)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except Exception:
        traceback.print_exc()
        print("error: this is a bug in ds4x; please report it with the output above", file=sys.stderr)
        return EXIT_BUG


def _said(e: Ds4xError) -> int:
    """The error and its hint on stderr; its exit code."""
    message, hint = words.worded(e)
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    return e.exit_code


def main_entry() -> None:
    sys.exit(main(sys.argv[1:]))
