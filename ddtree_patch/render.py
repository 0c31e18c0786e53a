"""Turn reports into text: rich tables for people, unified diffs for dry runs."""

from __future__ import annotations

import dataclasses
import difflib
import re

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ddtree_patch.audit import AuditReport
from ddtree_patch.errors import DDTreePatchError
from ddtree_patch.model import Plan
from ddtree_patch.sites import Decision, with_carried

_STYLE = {Decision.UNHANDLED: "bold red", Decision.EDIT: "cyan", Decision.WIDEN: "green", Decision.KEEP: "yellow",
          Decision.NARROW: "magenta"}
_ORDER = (Decision.UNHANDLED, Decision.EDIT, Decision.WIDEN, Decision.NARROW, Decision.KEEP)


BAD_STATES = ("drifted", "stale", "interrupted", "damaged")  # status and audit exit 1 and name the next command
SERVE = ("python -m sglang.launch_server --model-path <target> --attention-backend triton --speculative-algorithm DDTREE "
         "--speculative-draft-model-path <dflash drafter> --speculative-ddtree-budget 32")


def next_step(state, where: str) -> str:
    """The command to run next for a status.Status, in every state."""
    if state.advice:
        return with_target(state.advice, where)
    if state.state == "pristine":
        return with_target("`ddtree-patch apply --dry-run` previews the patch; `ddtree-patch apply` writes it", where)
    return with_target(f"serve with `{SERVE}`; `ddtree-patch revert` undoes the patch", where)


def audit_json(report: AuditReport, state, where: str) -> tuple[dict, bool]:
    """The audit's --json body and its verdict: the sites' proof plus the install's state as `status` sees it."""
    body = report.to_json()
    problems = [with_target(problem, where) for problem in body["problems"]]
    if state.state in BAD_STATES:
        problems.append(f"install is {state.state}: {next_step(state, where)}")
    body.update(state=state.state, sites_state=body["state"], problems=problems,
                next=next_step(state, where), sites=[s.to_json() for s in with_carried(report.sites)])
    return body, not problems


def _mark(site, patched: bool) -> str:
    if site.applied:
        return " (applied)"
    if patched and site.decision is Decision.KEEP:
        return " (kept)"
    return ""


WIDE_TABLE = 160  # columns below which the audit's seven-column table would wrap its cells letter by letter


def audit_tables(report: AuditReport, console: Console, state=None, where: str = "") -> None:
    """Tables on a terminal; one line per site when piped, so paths never wrap."""
    install = report.install
    shown = state.state if state is not None else report.state
    console.print(f"SGLang {install.version} at {install.package_dir} - state: [bold]{shown}[/]")
    for warning in install.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    sites = with_carried(report.sites)
    patched = report.state == "patched"
    for decision in _ORDER:
        rows = [s for s in sites if s.decision is decision]
        if not rows:
            continue
        if not console.is_terminal:
            console.print(f"{decision.value} ({len(rows)})", highlight=False)
            for s in rows:  # raw tab-separated lines: greppable, never wrapped or re-spaced
                console.file.write(f"  {s.path}:{s.line}\t{s.qualname}\t{s.form}\t{s.decision.value}"
                                   f"{_mark(s, patched)}\t{s.capability or '-'}\t{s.rule or '-'}\t{s.reason}\n")
            continue
        if console.width < WIDE_TABLE:  # a narrow terminal: one block per site, wrapped as prose
            console.print(f"[{_STYLE[decision]}]{decision.value} ({len(rows)})[/]", highlight=False)
            for s in rows:
                head = f"  [bold]{escape(f'{s.path}:{s.line}')}[/]  {s.decision.value}{_mark(s, patched)}"
                console.print(head, highlight=False)
                console.print(escape(f"      in {s.qualname} - form {s.form} - capability {s.capability or '-'} - "
                                     f"rule {s.rule or '-'}"), highlight=False)
                console.print(escape(f"      {s.reason}"), highlight=False)
            continue
        table = Table(title=f"{decision.value} ({len(rows)})", title_style=_STYLE[decision], expand=False)
        table.add_column("site", no_wrap=True)
        for column in ("in", "form", "decision", "capability", "reason", "rule"):
            table.add_column(column, overflow="fold")
        for s in rows:
            table.add_row(f"{s.path}:{s.line}", s.qualname, s.form, s.decision.value + _mark(s, patched), s.capability or "-", s.reason,
                          s.rule or "-", style=_STYLE[decision] if decision is Decision.UNHANDLED else None)
        console.print(table)
    data, ok = audit_json(report, state, where) if state is not None else (report.to_json(), report.ok)
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
    for problem in data["problems"]:
        console.print(f"[bold red]FAIL:[/] {problem}", highlight=False)
    if ok:
        console.print("[bold green]OK:[/] every DFLASH site is decided")
    if state is not None:
        console.print(f"next: {data['next']}", highlight=False, markup=False)


def plan_diff(plan: Plan) -> str:
    from ddtree_patch.analyse import SourceText  # libcst: not needed by a warm audit

    chunks = []
    for edit in plan.edits:
        before = SourceText.decode(edit.before).lines
        after = SourceText.decode(edit.after).lines
        chunks.extend(difflib.unified_diff(before, after, f"a/sglang/{edit.path}", f"b/sglang/{edit.path}"))
    return "".join(chunks)


def plan_added(plan: Plan) -> list[str]:
    return [f"sglang/{added.path} ({len(added.data)} bytes)" for added in plan.added]


_COMMAND = re.compile(r"`(ddtree-patch (?:apply|revert|status|audit)[^`]*)`")


def with_target(text: str, where: str) -> str:
    """Advice names bare commands; add the user's own --target/--python so it can be pasted."""
    return _COMMAND.sub(lambda m: f"`{m.group(1)}{where}`", text) if where else text


_FIRST_COMMAND = re.compile(r"`([^`]+)`")


def state_error(state, where: str) -> dict:
    """The --json `error` of a status whose install needs a command (exit 1): the state, its advice,
    and the first command the advice names as `next`."""
    advice = with_target(state.advice, where)
    found = _FIRST_COMMAND.search(advice)
    return {"code": 1, "message": f"the install is {state.state}: {advice}",
            "next": found.group(1) if found else f"ddtree-patch status{where}"}


def audit_error(body: dict, state, where: str) -> dict | None:
    """The --json `error` of a failed audit: the install's state first (as `status` gives it), else
    the sites' problems, with the first command they name (or the bug report) as `next`."""
    if state.state in BAD_STATES:
        return state_error(state, where)
    if not body["problems"]:
        return None
    message = "; ".join(body["problems"])
    found = _FIRST_COMMAND.search(message)
    next_step = with_target(f"`{found.group(1)}`", where).strip("`") if found else _NEXT[5]
    return {"code": 1, "message": message, "next": next_step}


def result_json(result, where: str) -> dict:
    """A verb's own --json fields; the envelope (envelope.document) carries tool and SGLang versions."""
    data = dataclasses.asdict(result)
    data.pop("sglang_version", None)
    if "state" in data:  # a Status: the version that wrote the manifest, not this tool's
        data["patched_by"] = data.pop("tool_version", None)
        data["next"] = next_step(result, where)
    else:
        data.pop("tool_version", None)
    if isinstance(data.get("advice"), str):
        data["advice"] = with_target(data["advice"], where)
    return data


def result_lines(result, where: str) -> list[str]:
    """One summary line per fact of an ApplyResult, RevertResult or Status."""
    data = result_json(result, where)
    lines = []
    if "state" in data:
        head = f"state: {data['state']} (SGLang {result.sglang_version})"
        if data["state"] == "interrupted":
            head += (f": {data['journal_op']} by ddtree-patch {data['patched_by']} "
                     f"(pid {data['journal_pid']}) started at {data['journal_started_at']}")
        elif data.get("applied_at"):
            head += f", patched by ddtree-patch {data['patched_by']} at {data.get('applied_at')}"
        lines.append(head)
        if data.get("busy") and data["state"] != "interrupted":  # an interrupted state's advice says so itself
            lines.append("busy: another ddtree-patch holds the lock right now (an apply or revert is running)")
        lines += [f"  {f['path']}: {f['state']}" for f in data.get("files", ()) if f.get("state") != "patched"]
        lines.append(f"next: {data['next']}")
        return lines
    if data["action"] == "unchanged":  # nothing was written: the counts say what the patch in place holds
        lines.append(f"unchanged: this patch is already in place ({len(data.get('edited', ()))} file(s) edited, "
                     f"{len(data.get('added', ()))} added)")
    else:
        lines.append(data["action"])
    for key in ("edited", "added", "restored", "removed", "forced", "leftovers"):
        if data.get(key) and data["action"] != "unchanged":
            lines.append(f"{key}: {len(data[key])} file(s)")
            lines += [f"  {path}" for path in data[key]]
    if data.get("recovered"):
        lines.append(f"recovered an interrupted {data['recovered']['op']}: {data['recovered']['outcome']}")
    if data.get("kept_edits"):
        lines.append(f"kept what --force overwrote (your edits) in {data['kept_edits']}")
    if data.get("previous_tool_version"):
        lines.append(f"replaced the patch of ddtree-patch {data['previous_tool_version']}")
    lines += [f"warning: {w}" for w in data.get("warnings", ())]
    if data["action"] in ("applied", "reapplied", "unchanged"):
        lines.append(f"serve: {SERVE}")
        lines.append(with_target("undo: `ddtree-patch revert`", where))
    return lines


# What to run next after an error, by exit code, when the message itself names no command.
_NEXT = {
    2: "ddtree-patch {command} --help",
    3: "ddtree-patch {command} --target <site-packages> (or --python <interpreter with SGLang>)",
    4: "pip install 'sglang>=0.5.11'",  # a --strict refusal carries its own (the command without it)
    5: "report the bug with the output of `ddtree-patch audit --json`",
    6: "wait for the other ddtree-patch to finish, then run `ddtree-patch {command}` again",
    7: "run `ddtree-patch {command}` as a user who can write site-packages",
    8: "ddtree-patch status",
    9: "ddtree-patch revert --force",
    10: "free the space or fix the permission, then run `ddtree-patch {command}` again",
    11: "ddtree-patch {command}",
    12: "ddtree-patch status",
}


def error_json(error: DDTreePatchError, command: str, where: str) -> dict:
    next_step = (error.next or _NEXT.get(error.exit_code, "ddtree-patch status")).replace("{command}", command)
    if error.exit_code not in (2, 3):  # those say where to look instead
        next_step = with_target(f"`{next_step}`", where).strip("`")
    return {"code": error.exit_code, "message": with_target(error.message, where), "next": next_step}
