"""The `ddtree-patch` command line: parse options, call one engine function, render the result."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shlex
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, Optional

from ddtree_patch.envelope import document

INTERRUPTED_EARLY = "interrupted (Ctrl-C); nothing was written"
_PID = os.getpid()


def _interrupted_before_writing(install: object = None) -> NoReturn:
    """SIGINT until a command starts its transaction (`_Run.writing`): nothing was written, so say
    that (one JSON document under --json; `install`: the SGLang found so far) and leave at once. A
    KeyboardInterrupt instead could surface inside an import or a class body as another exception
    (libcst's: a RuntimeError from `__set_name__`) or, around click, as a silent exit 130."""
    if os.getpid() != _PID:  # a forked scan worker: its parent says it
        os._exit(130)
    args = sys.argv[1:]
    command = next((a for a in args if not a.startswith("-")), "ddtree-patch")
    again = shlex.join(["ddtree-patch", *args])
    try:
        if "--json" in args:
            error = {"code": 130, "message": INTERRUPTED_EARLY, "next": again}
            sys.stdout.write(json.dumps(document(command, install, False, None, error), indent=2) + "\n")
            sys.stdout.flush()
        else:
            show_cursor = "\x1b[?25h\n" if sys.stderr.isatty() else ""  # a progress bar hid it
            sys.stderr.write(f"{show_cursor}error: {INTERRUPTED_EARLY}\nnext: {again}\n")
            sys.stderr.flush()
    except OSError:  # nobody is reading: the exit code still tells
        pass
    os._exit(130)


def _run_as_the_program() -> bool:
    """Started as `ddtree-patch` or `python -m ddtree_patch`, not imported by another program."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "ddtree_patch.__main__" or Path(sys.argv[0]).stem == "ddtree-patch"


def _on_sigint_before_writing(signum: int, frame: object) -> None:
    _interrupted_before_writing()


if _run_as_the_program():  # main() sets it again; the imports below take a noticeable while
    signal.signal(signal.SIGINT, _on_sigint_before_writing)

import typer  # noqa: E402 (after the handler above)
from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from typer.core import TyperCommand, TyperGroup  # noqa: E402

from ddtree_patch import __version__  # noqa: E402
from ddtree_patch.audit import audit as run_audit  # noqa: E402
from ddtree_patch.errors import DDTreePatchError, Interrupted  # noqa: E402
from ddtree_patch.locate import SHORTER_FOLDER, locate, os_failure  # noqa: E402
from ddtree_patch.render import (  # noqa: E402
    BAD_STATES,
    audit_error,
    audit_json,
    audit_tables,
    error_json,
    next_step,
    plan_added,
    plan_diff,
    result_json,
    result_lines,
    state_error,
    with_target,
)
from ddtree_patch.status import status as install_status  # noqa: E402

FLAG = ""  # flags take no value: show none (typer would print <bool>)


class _FlagHelp:
    """--help is a flag too: typer 0.29 builds it without a metavar and prints `--help <bool>`."""

    def get_help_option(self, ctx):  # type: ignore[no-untyped-def]
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = FLAG
        return option


class _Group(_FlagHelp, TyperGroup):
    pass


class _Command(_FlagHelp, TyperCommand):
    pass


app = typer.Typer(
    cls=_Group,
    help="Add DDTree speculative decoding to an installed SGLang, reversibly.\n\n"
    "Examples:\n\n"
    "  ddtree-patch audit --target .venv/lib/python3.11/site-packages\n\n"
    "  ddtree-patch apply --dry-run\n\n"
    "  ddtree-patch apply && ddtree-patch status",
    no_args_is_help=True,
    add_completion=False,
)
# typer vendors click: its usage errors derive from the ClickException it carries
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _pipe_closed() -> None:
    """rich would exit 1 (the code of an UNHANDLED audit site): let `_printing` end it instead."""
    raise BrokenPipeError


def _stderr_closed() -> None:
    """`... 2>&1 | head -1`: the rest of the message has no reader; the exit code still tells."""
    err.quiet = True
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())


out.on_broken_pipe = _pipe_closed  # type: ignore[method-assign]
err.on_broken_pipe = _stderr_closed  # type: ignore[method-assign]


def _show_version(value: bool) -> None:
    if value:
        out.print(f"ddtree-patch {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True, metavar=FLAG,
                                 help="Print the tool's version and exit."),
) -> None:
    """Add DDTree speculative decoding to an installed SGLang, reversibly."""


PythonOpt = typer.Option(None, "--python", help="Patch the SGLang of this interpreter (asked in a subprocess).")
AskPythonOpt = typer.Option(None, "--python", help="Look at the SGLang of this interpreter (asked in a subprocess).")
RevertPythonOpt = typer.Option(None, "--python", help="Revert the SGLang of this interpreter (asked in a subprocess).")
TargetOpt = typer.Option(None, "--target", help="A site-packages folder, or the sglang package folder itself.")
StrictOpt = typer.Option(False, "--strict", metavar=FLAG, help="Refuse SGLang releases newer than the newest tested one.")
JsonOpt = typer.Option(False, "--json", metavar=FLAG, help="Print machine-readable JSON instead of tables.")


def _where(python: Optional[str], target: Optional[Path]) -> str:
    """The options that point a suggested command at the same SGLang, quoted for a shell."""
    return f" --python {shlex.quote(python)}" if python else f" --target {shlex.quote(str(target))}" if target else ""


def _print_document(doc: dict) -> None:
    """Plain json (rich's highlighter costs more than a warm audit itself); flushed here, so a
    closed pipe shows up inside `_printing`."""
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    sys.stdout.flush()


@contextmanager
def _printing(code: int):
    """Print the command's output, then leave with its `code`, also when the reader left early
    (`status | head -1`): whether the reader or the writer finishes first is chance, so a closed
    stdout is not an error (the code never depends on it), and it is quiet, as it is for `cat`.
    A Ctrl-C from here on ends it quietly too: the outcome is being printed (never a second document)."""
    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(130))
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
    raise typer.Exit(code)


class _Run:
    """One command: where it points, whether it prints JSON, and how it ends (success or error)."""

    def __init__(self, command: str, as_json: bool, python: Optional[str], target: Optional[Path]) -> None:
        self.command, self.as_json = command, as_json
        self.where = _where(python, target)
        self.install = None
        signal.signal(signal.SIGINT, lambda signum, frame: _interrupted_before_writing(self.install))

    def writing(self) -> None:
        """The transaction starts: Ctrl-C is a KeyboardInterrupt again, which the transaction turns
        into its own Interrupted while it writes, and `errors` reports around it."""
        signal.signal(signal.SIGINT, signal.default_int_handler)

    @contextmanager
    def errors(self):
        try:
            yield
        except KeyboardInterrupt:  # after `writing()`; the transaction turns one during its writes into Interrupted
            self.fail(Interrupted(self._interrupted()))
        except BrokenPipeError:
            raise
        except OSError as error:
            self.fail(os_failure(error, self.install))
        except DDTreePatchError as error:
            if isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENAMETOOLONG:
                error.next = SHORTER_FOLDER  # the transaction refused a path: the folder is too deep, not full
            self.fail(error)

    def _interrupted(self) -> str:
        """Ctrl-C around the transaction (its lock being taken, or after it committed): what the
        install holds now, as `status` reads it; the transaction may have written it."""
        try:
            state = install_status(self.install, tool_version=__version__)
        except (KeyboardInterrupt, DDTreePatchError):
            return "interrupted (Ctrl-C); `ddtree-patch status` shows what the install holds now"
        return f"interrupted (Ctrl-C); SGLang is {state.state} now: {next_step(state, '')}"

    def fail(self, error: DDTreePatchError) -> NoReturn:
        self.install = self.install or getattr(error, "install", None)  # found, then refused: still reported
        data = error_json(error, self.command, self.where)
        if self.as_json:
            drift = [{"path": d.path, "state": d.state, "diff": d.diff} for d in getattr(error, "drift", ())]
            body = {"drift": drift} if drift else {}
            with _printing(error.exit_code):
                _print_document(document(self.command, self.install, False, body, data))
        else:
            err.print(f"[bold red]error:[/] {escape(data['message'])}", highlight=False)
            if "ddtree-patch " not in data["message"]:  # the message names no command: say what to run
                err.print(f"next: {escape(data['next'])}", highlight=False)
            for drift in getattr(error, "drift", ()):
                err.print(f"{drift.path}: {drift.state}", highlight=False)
                if drift.diff:
                    err.out(drift.diff, highlight=False)
        raise typer.Exit(error.exit_code)

    def finish(self, ok: bool, body: dict, lines: list[str], error: dict | None = None) -> NoReturn:
        with self.errors(), _printing(0 if ok else 1):
            if self.as_json:
                _print_document(document(self.command, self.install, ok, body, error))
            else:
                for line in lines:
                    out.print(line, highlight=False)


@contextmanager
def _progress(enabled: bool, label: str):
    """A progress bar on a terminal; nothing when piped or printing JSON."""
    if not enabled or not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), console=err, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda _path: bar.advance(task)


@app.command(cls=_Command)
def audit(
    python: Optional[str] = AskPythonOpt,
    target: Optional[Path] = TargetOpt,
    strict: bool = StrictOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List every DFLASH site with its decision and reason; exit 1 if any is UNHANDLED.

    Works before apply (a preview) and after (a proof). Like `status`, exits 1 with the next
    command when the install is drifted, stale or interrupted. Example:
    ddtree-patch audit --target /srv/venv/lib/python3.11/site-packages --json
    """
    run = _Run("audit", as_json, python, target)
    with run.errors():
        run.install = locate(python, target, strict)
        with _progress(not as_json, "scanning") as progress:
            report = run_audit(run.install, progress)
        state = install_status(run.install, tool_version=__version__)
    body, ok = audit_json(report, state, run.where)
    if as_json:
        run.finish(ok, body, [], audit_error(body, state, run.where))
    with run.errors(), _printing(0 if ok else 1):
        audit_tables(report, out, state, run.where)


@app.command(cls=_Command)
def apply(
    python: Optional[str] = PythonOpt,
    target: Optional[Path] = TargetOpt,
    strict: bool = StrictOpt,
    dry_run: bool = typer.Option(False, "--dry-run", metavar=FLAG, help="Print the unified diff and the files to add; write nothing."),
    as_json: bool = JsonOpt,
) -> None:
    """Patch SGLang so --speculative-algorithm DDTREE works (one transaction, undone by revert).

    Example: ddtree-patch apply --dry-run | less
    """
    from ddtree_patch.plan import build_plan, refuse_native  # the engine (libcst, rules): only for apply
    from ddtree_patch.transaction import apply as apply_install
    from ddtree_patch.worker_fit import contract_warnings

    run = _Run("apply", as_json, python, target)
    with run.errors():
        run.install = locate(python, target, strict)
        refuse_native(run.install)  # before the lock: a native DDTree gets not even a lock file
        if not dry_run:  # plan and write under one lock: nothing can change in between
            run.writing()
            with _progress(not as_json, "applying") as progress:
                result = apply_install(
                    run.install,
                    lambda locked: build_plan(locked, progress=progress),
                    __version__,
                    progress=progress,
                    python=python,
                )
            result = dataclasses.replace(result, warnings=contract_warnings(run.install))
            run.finish(True, result_json(result, run.where), result_lines(result, run.where))
        with _progress(not as_json, "planning") as progress:
            plan = build_plan(run.install, progress=progress)
        if dry_run:
            current = install_status(run.install, plan, tool_version=__version__)
            up_to_date = current.state == "patched" and bool(current.plan_current)
            body = {"dry_run": True, "up_to_date": up_to_date,
                    "edits": [] if up_to_date else [e.path for e in plan.edits],
                    "added": [] if up_to_date else [a.path for a in plan.added],
                    "diff": "" if up_to_date else plan_diff(plan)}
            if as_json or up_to_date:
                run.finish(True, body, ["already applied, nothing to do"])
            with _printing(0):
                sys.stdout.write(plan_diff(plan))
                out.print("files to add:", highlight=False)
                for line in plan_added(plan):
                    out.print(f"  {line}", highlight=False)
                out.print(with_target("next: `ddtree-patch apply` writes this plan", run.where), highlight=False)


@app.command(cls=_Command)
def revert(
    python: Optional[str] = RevertPythonOpt,
    target: Optional[Path] = TargetOpt,
    force: bool = typer.Option(False, "--force", metavar=FLAG, help="Restore the originals even over files changed since apply."),
    as_json: bool = JsonOpt,
) -> None:
    """Put back every original byte, remove the added files, and verify the package.

    Refuses (exit 9, with a diff per file) when a patched file changed since apply.
    Example: ddtree-patch revert --target /srv/venv/lib/python3.11/site-packages
    """
    from ddtree_patch.transaction import revert as revert_install

    run = _Run("revert", as_json, python, target)
    with run.errors():
        run.install = locate(python, target, strict=False)
        run.writing()
        with _progress(not as_json, "reverting") as progress:
            result = revert_install(run.install, force=force, progress=progress)
        run.finish(True, result_json(result, run.where), result_lines(result, run.where))


@app.command(cls=_Command)
def status(
    python: Optional[str] = AskPythonOpt,
    target: Optional[Path] = TargetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Say whether SGLang is pristine, patched (by which version, when), drifted, stale or interrupted.

    Exits 1 (with the command to run next) when drifted, stale, interrupted or damaged.
    Example: ddtree-patch status --json
    """
    run = _Run("status", as_json, python, target)
    with run.errors():
        run.install = locate(python, target, strict=False)
        result = install_status(run.install, tool_version=__version__)
    ok = result.state not in BAD_STATES
    run.finish(ok, result_json(result, run.where), result_lines(result, run.where),
               None if ok else state_error(result, run.where))


def main() -> None:
    """Usage errors too end in one JSON document under --json (click would print prose), and so
    does a Ctrl-C before anything was written."""
    as_json = "--json" in sys.argv[1:]
    signal.signal(signal.SIGINT, _on_sigint_before_writing)  # until a command's `_Run.writing()`
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        code = 130
    except _CLICK_ERROR as error:
        if not as_json:
            error.show()
            raise SystemExit(error.exit_code) from None
        command = next((a for a in sys.argv[1:] if a in app_commands()), "ddtree-patch")
        data = {"code": error.exit_code, "message": error.format_message(),
                "next": f"ddtree-patch {command} --help" if command != "ddtree-patch" else "ddtree-patch --help"}
        _print_document(document(command, None, False, None, data))
        raise SystemExit(error.exit_code) from None
    raise SystemExit(code or 0)


def app_commands() -> set[str]:
    return {c.name or c.callback.__name__ for c in app.registered_commands}


if __name__ == "__main__":
    main()
