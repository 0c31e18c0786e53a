"""Turn reports into text: rich tables for people, unified diffs for dry runs."""

from __future__ import annotations

import difflib

from rich.console import Console
from rich.table import Table

from ddtree_patch.analyse import SourceText
from ddtree_patch.audit import AuditReport
from ddtree_patch.model import Plan
from ddtree_patch.sites import Decision

_STYLE = {Decision.UNHANDLED: "bold red", Decision.EDIT: "cyan", Decision.WIDEN: "green", Decision.KEEP: "yellow"}
_ORDER = (Decision.UNHANDLED, Decision.EDIT, Decision.WIDEN, Decision.KEEP)


def audit_tables(report: AuditReport, console: Console) -> None:
    install = report.install
    console.print(f"SGLang {install.version} at {install.package_dir} - state: [bold]{report.state}[/]")
    for warning in install.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    sites = report.sites
    for decision in _ORDER:
        rows = [s for s in sites if s.decision is decision]
        if not rows:
            continue
        table = Table(title=f"{decision.value} ({len(rows)})", title_style=_STYLE[decision], expand=False)
        for column in ("site", "in", "form", "reason", "rule"):
            table.add_column(column, overflow="fold")
        for s in rows:
            mark = " (applied)" if s.applied else ""
            table.add_row(f"{s.path}:{s.line}", s.qualname, s.form + mark, s.reason, s.rule or "-")
        console.print(table)
    data = report.to_json()
    summary = ", ".join(f"{k} {v}" for k, v in data["summary"].items())
    mentions = data["mentions"]
    console.print(f"sites: {summary}")
    console.print(
        f"files: {data['files']['scanned']} scanned, {data['files']['candidates']} mention dflash "
        f"({data['files']['cache_hits']} from cache); text mentions {mentions.get('text', 0)}, "
        f"references {mentions.get('reference', 0)} (counted, never edited)"
    )
    for skipped in data["files"]["skipped"]:
        console.print(f"[yellow]skipped[/] {skipped['path']}: {skipped['reason']}")
    for problem in report.problems:
        console.print(f"[bold red]FAIL:[/] {problem}")
    if report.ok:
        console.print("[bold green]OK:[/] every DFLASH site is decided")


def plan_diff(plan: Plan) -> str:
    chunks = []
    for edit in plan.edits:
        before = SourceText.decode(edit.before).lines
        after = SourceText.decode(edit.after).lines
        chunks.extend(difflib.unified_diff(before, after, f"a/sglang/{edit.path}", f"b/sglang/{edit.path}"))
    return "".join(chunks)


def plan_added(plan: Plan) -> list[str]:
    return [f"sglang/{added.path} ({len(added.data)} bytes)" for added in plan.added]
