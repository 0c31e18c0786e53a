"""Turn reports into text: rich tables for people, unified diffs for dry runs."""

from __future__ import annotations

import dataclasses
import difflib

from rich.console import Console
from rich.table import Table

from ddtree_patch.analyse import SourceText
from ddtree_patch.audit import AuditReport
from ddtree_patch.model import Plan
from ddtree_patch.sites import Decision

_STYLE = {Decision.UNHANDLED: "bold red", Decision.EDIT: "cyan", Decision.WIDEN: "green", Decision.KEEP: "yellow",
          Decision.NARROW: "magenta"}
_ORDER = (Decision.UNHANDLED, Decision.EDIT, Decision.WIDEN, Decision.NARROW, Decision.KEEP)


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
        for column in ("site", "in", "form", "decision", "capability", "reason", "rule"):
            table.add_column(column, overflow="fold")
        for s in rows:
            mark = " (applied)" if s.applied else ""
            table.add_row(f"{s.path}:{s.line}", s.qualname, s.form, s.decision.value + mark, s.capability or "-", s.reason,
                          s.rule or "-", style=_STYLE[decision] if decision is Decision.UNHANDLED else None)
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


def with_target(text: str, where: str) -> str:
    """Advice names bare commands; add the user's own --target/--python so it can be pasted."""
    for verb in ("apply", "revert", "status"):
        text = text.replace(f"`ddtree-patch {verb}", f"`ddtree-patch {verb}{where}")
    return text


def result_json(result, where: str) -> dict:
    data = dataclasses.asdict(result)
    if isinstance(data.get("advice"), str):
        data["advice"] = with_target(data["advice"], where)
    return data


def result_lines(result, where: str) -> list[str]:
    """One summary line per fact of an ApplyResult, RevertResult or Status."""
    data = result_json(result, where)
    lines = []
    if "state" in data:
        head = f"state: {data['state']} (SGLang {data['sglang_version']})"
        if data["state"] == "interrupted":
            head += (f": {data['journal_op']} by ddtree-patch {data['tool_version']} "
                     f"(pid {data['journal_pid']}) started at {data['journal_started_at']}")
        elif data.get("applied_at"):
            head += f", patched by ddtree-patch {data['tool_version']} at {data['applied_at']}"
        lines.append(head)
        lines += [f"  {f['path']}: {f['state']}" for f in data.get("files", ()) if f.get("state") != "patched"]
        if data.get("advice"):
            lines.append(f"next: {data['advice']}")
        return lines
    lines.append(data["action"])
    for key in ("edited", "added", "restored", "removed", "forced", "leftovers"):
        if data.get(key):
            lines.append(f"{key}: {len(data[key])} file(s)")
            lines += [f"  {path}" for path in data[key]]
    if data.get("recovered"):
        lines.append(f"recovered an interrupted {data['recovered']['op']}: {data['recovered']['outcome']}")
    if data.get("previous_tool_version"):
        lines.append(f"replaced the patch of ddtree-patch {data['previous_tool_version']}")
    lines += [f"warning: {w}" for w in data.get("warnings", ())]
    return lines
