"""Render the README's support table, gain summary and test runs, and the evidence index, from the run records.

    python -m scripts.dev.render_evidence           # rewrite the rendered parts of README.md and docs/evidence/README.md
    python -m scripts.dev.render_evidence --check   # exit 1, naming each part that differs, when they are stale

The records (docs/evidence/records/*.toml, one per GPU, benchmark or CPU run) are the data; this
file is the only mechanism. The README keeps its prose; only the text between
`<!-- evidence:NAME -->` and `<!-- /evidence:NAME -->` is rendered, so a figure in those parts
can come from nowhere but a record. Standard library only (tomllib; tomli on Python 3.10), so it
runs as a plain script or a module, before the package is installed.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = Path("docs/evidence")
RECORDS = EVIDENCE / "records"
LOGS = EVIDENCE / "logs"
INDEX = EVIDENCE / "README.md"

KINDS = ("cpu-patch", "cpu-runtime", "gpu-matrix", "gpu-sampling", "benchmark", "cpu-tests")
VERDICTS = ("pass", "partial", "measured", "incomplete")
REQUIRED = ("title", "date", "commit", "machine", "card", "sglang", "kind", "suite", "command",
            "verdict", "summary", "logs")
GPU_CELL_NONE = "not run"  # the README says why (0.5.18+ pin a newer torch than the GPU machine has)


@dataclass(frozen=True)
class Record:
    id: str
    title: str
    date: str
    commit: str
    machine: str
    card: str
    sglang: tuple[str, ...]
    kind: str
    suite: str
    command: str
    verdict: str
    summary: str
    logs: tuple[str, ...]
    variant: str = ""
    ci: bool = False
    gain: bool = False
    figures: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The summary with its `{figure}` placeholders filled from the record's own figures."""
        return self.summary.format(**self.figures)

    @property
    def when(self) -> str:
        return "CI" if self.ci else self.date


class RecordError(ValueError):
    """A record (or README) that cannot be rendered: the message names the file, the field and the fix."""


def load_record(path: Path, root: Path = ROOT) -> Record:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise RecordError(f"{path}: not valid TOML ({e})") from None
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise RecordError(f"{path}: missing {', '.join(missing)}")
    unknown = set(data) - set(REQUIRED) - {"variant", "ci", "gain", "figures"}
    if unknown:
        raise RecordError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
    if data["kind"] not in KINDS:
        raise RecordError(f"{path}: kind {data['kind']!r} is not one of {', '.join(KINDS)}")
    if data["verdict"] not in VERDICTS:
        raise RecordError(f"{path}: verdict {data['verdict']!r} is not one of {', '.join(VERDICTS)}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", data["date"]):
        raise RecordError(f"{path}: date {data['date']!r} is not YYYY-MM-DD")
    bad = [v for v in data["sglang"] if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", v)]
    if bad:
        raise RecordError(f"{path}: sglang {', '.join(bad)} is not a release like 0.5.15 or 0.5.15.post1")
    for log in data["logs"]:
        if not (root / log).is_file():
            raise RecordError(f"{path}: log {log} does not exist")
    record = Record(id=path.stem, **{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
    try:
        record.text
    except (KeyError, IndexError, ValueError) as e:
        raise RecordError(f"{path}: summary names a figure it lacks: {e}") from None
    return record


def load_records(root: Path = ROOT) -> list[Record]:
    return sorted((load_record(p, root) for p in (root / RECORDS).glob("*.toml")),
                  key=lambda r: (r.date, r.id))


def release_key(version: str) -> tuple:
    """0.5.12 < 0.5.12.post1 < 0.5.13."""
    base, _, post = version.partition(".post")
    return (*(int(p) for p in base.split(".")), int(post or -1))


def link(path: str, text: str, base: Path) -> str:
    """A Markdown link to a repo path, relative to the document at `base` (a folder under the root)."""
    return f"[{text}]({Path(os.path.relpath(path, base)).as_posix()})"


def record_link(r: Record, base: Path) -> str:
    return link((RECORDS / f"{r.id}.toml").as_posix(), r.id, base)


def gpu_cell(r: Record) -> str:
    if "rows_passed" in r.figures:
        rows = f"{r.figures['rows_passed']}/{r.figures['rows_total']}"
    else:  # a record without row counts: "all rows" only when it passed
        rows = "all rows" if r.verdict == "pass" else r.verdict
    label = f"{r.variant} " if r.variant else ""
    return f"{label}{rows} ({r.card}, {r.when})"


def support_table(records: list[Record]) -> str:
    """One row per SGLang release: the patch tests, the runtime on the CPU, the GPU matrix.

    In each cell CI comes first, then the newest run; in the GPU cell the full matrices come before
    the runs of a variant (a page size, a backend, an opt-in switch)."""
    releases = sorted({v for r in records for v in r.sglang if r.kind in ("cpu-patch", "cpu-runtime", "gpu-matrix")},
                      key=release_key)
    lines = ["| SGLang | patch: audit, apply, revert | runtime on the CPU | GPU matrix: rows passed (card, date) |",
             "|---|---|---|---|"]
    for v in releases:
        def cells(kind: str, render) -> str:
            hits = sorted((r for r in records if r.kind == kind and v in r.sglang),
                          key=lambda r: (bool(r.variant) if kind == "gpu-matrix" else not r.ci, _newest_first(r.date)))
            return "; ".join(render(r) for r in hits)
        patch = cells("cpu-patch", lambda r: r.when) or "-"
        cpu = cells("cpu-runtime", lambda r: f"{r.variant} ({r.when})") or "-"
        gpu = cells("gpu-matrix", gpu_cell) or GPU_CELL_NONE
        lines.append(f"| {v} | {patch} | {cpu} | {gpu} |")
    return "\n".join(lines)


def _newest_first(date: str) -> tuple[int, ...]:
    return tuple(-int(p) for p in date.split("-"))


def bullets(records: list[Record], base: Path = Path()) -> str:
    """One line per record: what it showed, where, when, and the link to it."""
    lines = []
    for r in records:
        where = f"{r.card}, SGLang {', '.join(r.sglang)}" if r.sglang else r.card
        lines.append(f"- {r.text} ({where}, {r.when}; {record_link(r, base)})")
    return "\n".join(lines)


def gain_summary(records: list[Record]) -> str:
    """Newest run first: the README leads with the latest regime measured."""
    return bullets(sorted((r for r in records if r.gain), key=lambda r: (r.date, r.id), reverse=True))


def measured_test_runs(records: list[Record]) -> str:
    return bullets([r for r in records if r.kind == "cpu-tests"])


def evidence_index(records: list[Record], root: Path = ROOT) -> str:
    """docs/evidence/README.md: every record, then every kept log no record names."""
    lines = ["# Evidence", "",
             "One record per run the README relies on: `records/<id>.toml` (date, commit, machine and card,",
             "command, suite, verdict, key figures) with its raw logs under `logs/`. The README's support",
             "table, gain summary and test runs are rendered from these records by `python -m scripts.dev.render_evidence`;",
             "`tests/test_readme_render.py` fails when the README differs from what they render.",
             "This file is rendered too: edit the records, not this file. The README's earlier dated notes,",
             "with every run's details: [README-history.md](README-history.md).", "",
             "| date | record | kind | SGLang | card | verdict | what it showed | logs |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: (r.date, r.id), reverse=True):
        logs = ", ".join(link(log, Path(log).name, EVIDENCE) for log in r.logs) or "none kept"
        releases = ", ".join(r.sglang) or "-"
        lines.append(f"| {r.when} | {record_link(r, EVIDENCE)} | {r.kind} | {releases} | {r.card} | "
                     f"{r.verdict} | {r.text} | {logs} |")
    named = {Path(log).name for r in records for log in r.logs}
    others = sorted(p.name for p in (root / LOGS).iterdir() if p.is_file() and p.name not in named)
    if others:
        lines += ["", "## Other raw logs", "",
                  "Tuning and investigation runs that no README claim rests on; the documents that discuss",
                  "them ([kernels.md](../kernels.md), [sampling.md](../sampling.md), [gpu-check.md](../gpu-check.md),",
                  "[benchmarks.md](../benchmarks.md)) link them by name.", ""]
        lines += [f"- {link((LOGS / name).as_posix(), name, EVIDENCE)}" for name in others]
    return "\n".join(lines) + "\n"


def _section(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- evidence:{name} -->\n)(.*?)(<!-- /evidence:{name} -->)", re.S)


def render_readme(readme: str, records: list[Record]) -> str:
    """The README with each marked part replaced by what the records render."""
    parts = {"support-table": support_table(records), "gain": gain_summary(records), "tests": measured_test_runs(records)}
    for name, body in parts.items():
        pattern = _section(name)
        if not pattern.search(readme):
            raise RecordError(f"README.md has no <!-- evidence:{name} --> ... <!-- /evidence:{name} --> part: "
                              "put the two markers back where that part belongs")
        readme = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(3), readme)
    return readme


def rendered(root: Path = ROOT) -> dict[Path, str]:
    """Each rendered file's expected text."""
    records = load_records(root)
    readme = (root / "README.md").read_text(encoding="utf-8")
    return {Path("README.md"): render_readme(readme, records), INDEX: evidence_index(records, root)}


def stale(root: Path = ROOT) -> list[Path]:
    """The rendered files whose text differs from what the records render."""
    out = []
    for path, text in rendered(root).items():
        current = (root / path).read_text(encoding="utf-8") if (root / path).exists() else None
        if current != text:
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a rendered part is stale")
    args = parser.parse_args(argv)
    try:
        if args.check:
            paths = stale()
            for path in paths:
                print(f"{path} differs from the records: run python -m scripts.dev.render_evidence", file=sys.stderr)
            return 1 if paths else 0
        for path, text in rendered().items():
            temp = (ROOT / path).with_suffix(".rendering")
            temp.write_text(text, encoding="utf-8")
            temp.replace(ROOT / path)  # never a half-written README
            print(f"rendered {path}")
    except RecordError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
