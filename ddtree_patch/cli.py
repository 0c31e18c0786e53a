"""The `ddtree-patch` command line: parse options, call one engine function, render the result."""

from __future__ import annotations

import dataclasses
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from ddtree_patch import __version__
from ddtree_patch.audit import audit as run_audit
from ddtree_patch.errors import DDTreePatchError
from ddtree_patch.locate import locate
from ddtree_patch.plan import build_plan
from ddtree_patch.status import status as install_status
from ddtree_patch.transaction import apply_plan
from ddtree_patch.transaction import revert as revert_install
from ddtree_patch.worker_fit import contract_warnings
from ddtree_patch.render import audit_tables, plan_added, plan_diff, result_json, result_lines, with_target

app = typer.Typer(
    help="Add DDTree speculative decoding to an installed SGLang, reversibly.\n\n"
    "Examples:\n\n"
    "  ddtree-patch audit --target .venv/lib/python3.11/site-packages\n\n"
    "  ddtree-patch apply --dry-run\n\n"
    "  ddtree-patch apply && ddtree-patch status",
    no_args_is_help=True,
    add_completion=False,
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

def _show_version(value: bool) -> None:
    if value:
        out.print(f"ddtree-patch {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                 help="Print the tool's version and exit."),
) -> None:
    """Add DDTree speculative decoding to an installed SGLang, reversibly."""


PythonOpt = typer.Option(None, "--python", help="Patch the SGLang of this interpreter (asked in a subprocess).")
TargetOpt = typer.Option(None, "--target", help="A site-packages folder, or the sglang package folder itself.")
StrictOpt = typer.Option(False, "--strict", help="Refuse SGLang releases newer than the newest tested one.")
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")


def _where(python: Optional[str], target: Optional[Path]) -> str:
    return f" --python {python}" if python else f" --target {target}" if target else ""


@contextmanager
def _errors(where: str = ""):
    try:
        yield
    except DDTreePatchError as error:
        err.print(f"[bold red]error:[/] {escape(with_target(str(error), where))}", highlight=False)
        for drift in getattr(error, "drift", ()):
            err.print(f"{drift.path}: {drift.state}", highlight=False)
            if drift.diff:
                err.out(drift.diff, highlight=False)
        raise typer.Exit(error.exit_code) from None


@contextmanager
def _progress(enabled: bool, label: str):
    """A progress bar on a terminal; nothing when piped or printing JSON."""
    if not enabled or not err.is_terminal:
        yield None
        return
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), console=err, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda _path: bar.advance(task)


@app.command()
def audit(
    python: Optional[str] = PythonOpt,
    target: Optional[Path] = TargetOpt,
    strict: bool = StrictOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List every DFLASH site with its decision and reason; exit 1 if any is UNHANDLED.

    Works before apply (a preview) and after (a proof). Example:
    ddtree-patch audit --target /srv/venv/lib/python3.11/site-packages --json
    """
    with _errors(_where(python, target)):
        install = locate(python, target, strict)
        with _progress(not as_json, "scanning") as progress:
            report = run_audit(install, progress)
    if as_json:
        out.print_json(json.dumps(report.to_json()))
    else:
        audit_tables(report, out)
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def apply(
    python: Optional[str] = PythonOpt,
    target: Optional[Path] = TargetOpt,
    strict: bool = StrictOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the unified diff and the files to add; write nothing."),
    as_json: bool = JsonOpt,
) -> None:
    """Patch SGLang so --speculative-algorithm DDTREE works (one transaction, undone by revert).

    Example: ddtree-patch apply --dry-run | less
    """
    with _errors(_where(python, target)):
        install = locate(python, target, strict)
        with _progress(not as_json, "planning") as progress:
            plan = build_plan(install, progress=progress)
        if dry_run:
            if as_json:
                out.print_json(json.dumps({
                    "schema": "ddtree-patch.plan/1",
                    "sglang": install.version,
                    "edits": [e.path for e in plan.edits],
                    "added": [a.path for a in plan.added],
                    "diff": plan_diff(plan),
                }))
            else:
                sys.stdout.write(plan_diff(plan))
                out.print("files to add:", highlight=False)
                for line in plan_added(plan):
                    out.print(f"  {line}", highlight=False)
            return
        with _progress(not as_json, "applying") as progress:
            result = apply_plan(plan, __version__, progress=progress, python=python)
        result = dataclasses.replace(result, warnings=contract_warnings(install))
    _print_result(result, as_json, python, target)


@app.command()
def revert(
    python: Optional[str] = PythonOpt,
    target: Optional[Path] = TargetOpt,
    force: bool = typer.Option(False, "--force", help="Restore the originals even over files changed since apply."),
    as_json: bool = JsonOpt,
) -> None:
    """Put back every original byte, remove the added files, and verify the package.

    Refuses (exit 9, with a diff per file) when a patched file changed since apply.
    Example: ddtree-patch revert --target /srv/venv/lib/python3.11/site-packages
    """
    with _errors(_where(python, target)):
        install = locate(python, target, strict=False)
        with _progress(not as_json, "reverting") as progress:
            result = revert_install(install, force=force, progress=progress)
    _print_result(result, as_json, python, target)


@app.command()
def status(
    python: Optional[str] = PythonOpt,
    target: Optional[Path] = TargetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Say whether SGLang is pristine, patched (by which version, when), drifted, stale or interrupted.

    Example: ddtree-patch status --json
    """
    with _errors(_where(python, target)):
        install = locate(python, target, strict=False)
        result = install_status(install, tool_version=__version__)
    _print_result(result, as_json, python, target)


def _print_result(result, as_json: bool, python: Optional[str], target: Optional[Path]) -> None:
    where = _where(python, target)
    if as_json:
        out.print_json(json.dumps(result_json(result, where)))
    else:
        for line in result_lines(result, where):
            out.print(line, highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
