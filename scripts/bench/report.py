"""Tables, goal checks and plots for scripts/bench/e2e.py, from its per-run records (pure functions).

A pair record: {"phase": "pair", "config", "algo", "budget", "batch", "temperature", "repeat",
"seconds", "tokens", "verify_ct", "same_as_plain", "tie_diffs", "bug_diffs"} (the last three on the
first repeat at T=0 only; the two counts since plain's near-ties are judged; budget None on DDTREE is
`--speculative-ddtree-budget auto`); a big-shape record:
{"phase": "big", "config", "algo", "batch", "repeat", "seconds", "prefill_seconds", "rounds", "tokens",
"verify_ct"} (the wall of the whole generation and of the same batch's prefill alone, taken just
before it). Speed-ups are medians of per-repeat ratios: repeat r of one config against repeat r of
the other, which ran next to it in time, so slow drift of the machine cancels instead of adding noise.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from scripts.gpu.matrix import TIE_GAP

GOAL_ACCEPT_RATIO = 1.3  # DDTREE / DFLASH accepted tokens per round at budget 32, trained pair, T=0
GOAL_ROUND_RATIO = 1.1  # DDTREE / DFLASH round time at equal verify width, 8B shape
GOAL_STRONG_ACCEPT = 4.0  # issue 49: DFLASH accepted tokens per round on the strong pair, batch 1, T=0
GOAL_STRONG_SPEEDUP = 1.25  # issue 49: DDTREE's best budget / DFLASH output tokens/s, batch 1, T=0
GOAL_AUTO_VS_BEST = 0.97  # issue 48: DDTREE budget auto / the best fixed budget's output tokens/s, per batch
GOAL_AUTO_VS_DFLASH = 1.0  # issue 48: DDTREE budget auto / DFLASH output tokens/s, per batch
BUDGET_TICKS = (4, 8, 16, 32, 64)
JUDGED = (" Plain's reference is an untimed run of the same batch with top-2 logprobs (plain's own row: its "
          "timed run against it). Each differing prompt is judged at its first differing token, as "
          "`scripts/gpu/matrix.py` does: a **near-tie** when plain's top-2 logprob gap there is < "
          f"{TIE_GAP} (plain decode and speculative verify reduce in different orders in bf16, so such a "
          "token can flip), else a **bug**.")


def spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def fmt(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    med, lo, hi = spread(values)
    if len(values) == 1 or lo == hi:
        return f"{med:.{digits}f}"
    return f"{med:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def accepted_per_round(rec: dict) -> float | None:
    """SGLang's definition (completion tokens / verify rounds), summed over the batch."""
    rounds = sum(rec["verify_ct"])
    return sum(rec["tokens"]) / rounds if rounds else None


def tokens_per_s(rec: dict) -> float:
    return sum(rec["tokens"]) / rec["seconds"]


def _by(records: list[dict], *keys: str) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def paired_ratios(num: list[dict], den: list[dict], value) -> list[float]:
    den_by_repeat = {r["repeat"]: r for r in den}
    return [value(r) / value(den_by_repeat[r["repeat"]]) for r in num
            if r["repeat"] in den_by_repeat and value(den_by_repeat[r["repeat"]])]


def is_auto(rec: dict) -> bool:
    """DDTREE with `--speculative-ddtree-budget auto`: a DDTREE record without a fixed budget."""
    return rec["algo"] == "DDTREE" and rec.get("budget") is None


def config_order(records: list[dict]) -> list[str]:
    """plain, DFLASH, then DDTREE by budget, budget auto after the fixed budgets."""
    rank = {"plain": 0, "DFLASH": 1, "DDTREE": 2}
    seen = {(rank[r["algo"]], is_auto(r), r.get("budget") or 0, r["config"]) for r in records}
    return [name for *_, name in sorted(seen)]


def pair_rows(records: list[dict]) -> list[dict]:
    pair = [r for r in records if r["phase"] == "pair"]
    groups = _by(pair, "temperature", "batch", "config")
    rows = []
    for (temp, batch, config), recs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        plain = groups.get((temp, batch, "plain"), [])
        dflash = groups.get((temp, batch, "dflash"), [])
        accept = [a for a in map(accepted_per_round, recs) if a is not None]
        same = [r for r in recs if r.get("same_as_plain") is not None]
        rows.append({
            "temperature": temp, "batch": batch, "config": config, "algo": recs[0]["algo"],
            "budget": recs[0].get("budget"), "variant": recs[0].get("variant"), "repeats": len(recs),
            "accept": accept, "tok_s": [tokens_per_s(r) for r in recs],
            "vs_plain": paired_ratios(recs, plain, tokens_per_s) if config != "plain" else [],
            "vs_dflash": paired_ratios(recs, dflash, tokens_per_s) if recs[0]["algo"] == "DDTREE" else [],
            "same_as_plain": same[0]["same_as_plain"] if same else None,
            "tie_diffs": same[0].get("tie_diffs") if same else None,
            "bug_diffs": same[0].get("bug_diffs") if same else None,
            "bug_gaps": same[0].get("bug_gaps", []) if same else [],
        })
    order = {name: i for i, name in enumerate(config_order(pair))}
    return sorted(rows, key=lambda r: (r["temperature"], r["batch"], order[r["config"]]))


def big_rows(records: list[dict]) -> list[dict]:
    """Per (attention backend, DDTREE variant, batch): DFLASH and DDTREE ms / round, their paired
    ratios, acceptance. A variant (a verify tile) is DDTREE's alone: it pairs with the backend's DFLASH."""
    big = [dict(r, backend=r.get("backend", "triton"), variant=r.get("variant")) for r in records if r["phase"] == "big"]
    groups = _by(big, "backend", "batch", "algo", "variant")
    keys = {(r["backend"], r["variant"], r["batch"]) for r in big if r["algo"] == "DDTREE"} | \
        {(r["backend"], None, r["batch"]) for r in big}
    rows = []
    for backend, variant, batch in sorted(keys, key=lambda k: (k[0] != "triton", k[0], k[1] or "", k[2])):  # triton, default first
        d, t = groups.get((backend, batch, "DFLASH", None), []), groups.get((backend, batch, "DDTREE", variant), [])
        prefill = {recs[0]["config"]: statistics.median(r["prefill_seconds"] for r in recs) for recs in (d, t) if recs}

        def ms(rec):
            # The median prefill of this config and batch, not the one sample beside the run: one
            # slow prefill call (a scheduler hiccup) would otherwise make a round negative.
            return 1000 * (rec["seconds"] - prefill[rec["config"]]) / rec["rounds"]

        rows.append({"backend": backend, "variant": variant, "batch": batch, "dflash_ms": [ms(r) for r in d],
                     "ddtree_ms": [ms(r) for r in t], "ratio": paired_ratios(t, d, ms),
                     "dflash_accept": [a for a in map(accepted_per_round, d) if a],
                     "ddtree_accept": [a for a in map(accepted_per_round, t) if a]})
    return rows


def goals(prows: list[dict], brows: list[dict]) -> list[str]:
    """The issue's three goals, each PASS / MISS / NOT MEASURED with the numbers behind it."""
    out = []
    t0 = [r for r in prows if r["temperature"] == 0 and not r.get("variant")]  # the goals are the default runtime's
    d = {r["batch"]: r for r in t0 if r["algo"] == "DFLASH"}
    b32 = {r["batch"]: r for r in t0 if r["algo"] == "DDTREE" and r["budget"] == 32}
    ratios = [statistics.median(b32[b]["accept"]) / statistics.median(d[b]["accept"])
              for b in sorted(b32) if b in d and b32[b]["accept"] and d[b]["accept"]]
    if ratios:
        ok = min(ratios) >= GOAL_ACCEPT_RATIO
        out.append(f"- Accepted tokens/round, DDTREE budget 32 / DFLASH, T=0: "
                   f"{', '.join(f'{x:.2f}' for x in ratios)} (batch {', '.join(map(str, sorted(b32)))}); "
                   f"goal >= {GOAL_ACCEPT_RATIO}: **{'PASS' if ok else 'MISS'}**")
    else:
        out.append("- Accepted tokens/round at budget 32 vs DFLASH: **NOT MEASURED**")
    for batch in (1, 8):
        cands = [r for r in t0 if r["algo"] == "DDTREE" and r["batch"] == batch and r["vs_dflash"]]
        if not cands:
            out.append(f"- DDTREE tokens/s > DFLASH at batch {batch}: **NOT MEASURED**")
            continue
        best = max(cands, key=lambda r: statistics.median(r["vs_dflash"]))
        med = statistics.median(best["vs_dflash"])
        out.append(f"- DDTREE tokens/s vs DFLASH at batch {batch}, T=0: best budget {best['budget']} "
                   f"at {fmt(best['vs_dflash'])}x; goal > 1: **{'PASS' if med > 1 else 'MISS'}**")
    for backend, variant in dict.fromkeys((r["backend"], r["variant"]) for r in brows):  # big_rows' order
        ratios_big = [(r["batch"], statistics.median(r["ratio"])) for r in brows
                      if r["ratio"] and (r["backend"], r["variant"]) == (backend, variant)]
        if not ratios_big:
            continue
        worst = max(ratios_big, key=lambda x: x[1])
        ok = worst[1] <= GOAL_ROUND_RATIO
        out.append(f"- 8B shape round time DDTREE / DFLASH at equal verify width ({big_label(backend, variant)}): worst "
                   f"{worst[1]:.2f} at batch {worst[0]}; goal <= {GOAL_ROUND_RATIO} at every batch: "
                   f"**{'PASS' if ok else 'MISS'}**")
    if not any(r["ratio"] for r in brows):
        out.append("- 8B shape round time: **NOT MEASURED**")
    return out


def strong_pair_goals(prows: list[dict]) -> list[str]:
    """Issue 49's goals on a strong pair, batch 1, T=0: DFLASH's acceptance, DDTREE's best budget's speed-up."""
    t0 = [r for r in prows if r["temperature"] == 0 and r["batch"] == 1 and not r.get("variant")]
    dflash = [r for r in t0 if r["algo"] == "DFLASH" and r["accept"]]
    if dflash:
        acc = statistics.median(dflash[0]["accept"])
        out = [f"- DFLASH accepted tokens/round, batch 1, T=0: {fmt(dflash[0]['accept'])}; goal >= "
               f"{GOAL_STRONG_ACCEPT}: **{'PASS' if acc >= GOAL_STRONG_ACCEPT else 'MISS'}**"]
    else:
        out = ["- DFLASH accepted tokens/round, batch 1, T=0: **NOT MEASURED**"]
    cands = [r for r in t0 if r["algo"] == "DDTREE" and r["vs_dflash"]]
    if not cands:
        return out + ["- DDTREE best budget vs DFLASH tokens/s, batch 1, T=0: **NOT MEASURED**"]
    best = max(cands, key=lambda r: statistics.median(r["vs_dflash"]))
    ok = statistics.median(best["vs_dflash"]) >= GOAL_STRONG_SPEEDUP
    return out + [f"- DDTREE best budget vs DFLASH tokens/s, batch 1, T=0: budget {best['budget']} at "
                  f"{fmt(best['vs_dflash'])}x; goal >= {GOAL_STRONG_SPEEDUP}: **{'PASS' if ok else 'MISS'}**"]


def auto_budget_goals(records: list[dict]) -> list[str]:
    """Issue 48's goals at each (temperature, batch) where budget auto ran: its tokens/s over the best fixed
    budget's there (the highest median tokens/s; variants left out) and over DFLASH's, each the median of
    per-repeat ratios; PASS / MISS / NOT MEASURED."""
    pair = [r for r in records if r["phase"] == "pair"]
    auto = _by([r for r in pair if is_auto(r)], "temperature", "batch")
    if not auto:
        return ["- DDTREE budget auto / the best fixed budget and / DFLASH, tokens/s: **NOT MEASURED**"]
    fixed = _by([r for r in pair if r["algo"] == "DDTREE" and not is_auto(r) and not r.get("variant")],
                "temperature", "batch", "budget")
    dflash = _by([r for r in pair if r["algo"] == "DFLASH"], "temperature", "batch")

    def line(what: str, where: str, ratios: list[float], goal: float) -> str:
        if not ratios:
            return f"- DDTREE budget auto / {what} tokens/s, {where}: **NOT MEASURED**"
        ok = statistics.median(ratios) >= goal
        return f"- DDTREE budget auto / {what} tokens/s, {where}: {fmt(ratios)}x; goal >= {goal}: " \
               f"**{'PASS' if ok else 'MISS'}**"

    out = []
    for (temp, batch), recs in sorted(auto.items()):
        where = f"batch {batch}, T={temp:g}"
        budgets = {b: rs for (t, n, b), rs in fixed.items() if (t, n) == (temp, batch)}
        best = max(budgets, key=lambda b: statistics.median(map(tokens_per_s, budgets[b])), default=None)
        out.append(line(f"the best fixed budget ({best})" if best is not None else "the best fixed budget", where,
                        paired_ratios(recs, budgets[best], tokens_per_s) if best is not None else [], GOAL_AUTO_VS_BEST))
        out.append(line("DFLASH", where, paired_ratios(recs, dflash.get((temp, batch), []), tokens_per_s),
                        GOAL_AUTO_VS_DFLASH))
    return out


def greedy_check(prows: list[dict]) -> list[str]:
    """One line over every judged T=0 row: do the greedy outputs differ from plain's only at near-ties
    (bf16 reduction order) or also elsewhere (bugs, named)? Nothing for results without the judgement."""
    judged = [r for r in prows if r["temperature"] == 0 and r.get("tie_diffs") is not None]
    if not judged:
        return []
    bugs = [r for r in judged if r["bug_diffs"]]
    n_bugs = sum(r["bug_diffs"] for r in bugs)
    total = sum(r["tie_diffs"] for r in judged) + n_bugs
    head = f"- Greedy outputs vs plain decoding, T=0 ({len(judged)} config x batch runs): {total} differences"
    if bugs:
        per_algo = {a: sum(r["bug_diffs"] for r in bugs if r["algo"] == a) for a in ("DFLASH", "DDTREE")}
        control = (f" (DFLASH, SGLang's own speculative path and so the control for this rule, has "
                   f"{per_algo['DFLASH']} of them, DDTREE {per_algo['DDTREE']})" if per_algo["DFLASH"] else "")
        gaps = sorted(g for r in bugs for g in r.get("bug_gaps") or [])
        spread = (f"; plain's top-2 logprob gap where they begin: median {statistics.median(gaps):.3f}, "
                  f"largest {gaps[-1]:.3f}" if gaps else "")
        return [f"{head}, **{n_bugs} not at a near-tie (bug)**{control}: "
                + ", ".join(f"{r['config']} batch {r['batch']} ({r['bug_diffs']})" for r in bugs) + spread]
    return [f"{head}, all at near-ties of plain (top-2 logprob gap < {TIE_GAP})" if total else head]


def same_cell(r: dict) -> str:
    """`= plain`: "7/8", with the judged differences when there are any: "7/8 (1 near-tie, 0 bug)"."""
    if r["same_as_plain"] is None:
        return ""
    if not (r.get("tie_diffs") or r.get("bug_diffs")):
        return r["same_as_plain"]
    return f"{r['same_as_plain']} ({r['tie_diffs']} near-tie, {r['bug_diffs']} bug)"


def pair_table(rows: list[dict], temperature: float) -> list[str]:
    lines = ["| batch | config | accepted tokens / round | output tokens/s | x plain | x DFLASH | = plain |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["temperature"] != temperature:
            continue
        lines.append(f"| {r['batch']} | {r['config']} | {fmt(r['accept'])} | {fmt(r['tok_s'], 0)} | "
                     f"{fmt(r['vs_plain'])} | {fmt(r['vs_dflash'])} | {same_cell(r)} |")
    return lines


def big_label(backend: str, variant: str | None) -> str:
    return f"{backend} attention" + (f", DDTREE {variant}" if variant else "")


def big_table(rows: list[dict]) -> list[str]:
    lines = ["| backend | batch | DFLASH ms / round | DDTREE ms / round | DDTREE / DFLASH | accepted / round DFLASH | DDTREE |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['backend'] + (', ' + r['variant'] if r['variant'] else '')} | {r['batch']} | {fmt(r['dflash_ms'])} | {fmt(r['ddtree_ms'])} | {fmt(r['ratio'])} | "
                     f"{fmt(r['dflash_accept'])} | {fmt(r['ddtree_accept'])} |")
    return lines


def plots(rows: list[dict], out_dir: Path, prefix: str = "bench-e2e") -> list[str]:
    """Accepted tokens vs budget and tokens/s vs budget: one panel per temperature, one line per batch
    size; DFLASH dotted and plain dash-dotted in the batch's colour. Returns the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    temps = sorted({r["temperature"] for r in rows})
    batches = sorted({r["batch"] for r in rows})
    colours = {b: f"C{i}" for i, b in enumerate(batches)}

    def median_of(temp, batch, algo, key):
        vals = [statistics.median(r[key]) for r in rows
                if r["temperature"] == temp and r["batch"] == batch and r["algo"] == algo and r[key]]
        return vals[0] if vals else None

    written = []
    for key, label, name, log_y in (("accept", "accepted tokens / round", "accept", False),
                                    ("tok_s", "output tokens / s", "tokens-per-s", True)):
        fig, axes = plt.subplots(1, len(temps), figsize=(6 * len(temps), 4.5), squeeze=False)
        for ax, temp in zip(axes[0], temps):
            for b in batches:
                pts = sorted((r["budget"], statistics.median(r[key])) for r in rows  # fixed budgets: auto has no x
                             if r["temperature"] == temp and r["batch"] == b and r["algo"] == "DDTREE"
                             and isinstance(r["budget"], int) and r[key])
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "-", marker="o", color=colours[b],
                            label=f"DDTREE, batch {b}")
                for algo, style in (("DFLASH", ":"), ("plain", "-.")):
                    base = median_of(temp, b, algo, key)
                    if base is not None:
                        ax.axhline(base, color=colours[b], linestyle=style, linewidth=1,
                                   label=f"{algo}, batch {b}")
            ax.set_xscale("log", base=2)
            ax.set_xticks(list(BUDGET_TICKS), [str(x) for x in BUDGET_TICKS])
            if log_y:
                ax.set_yscale("log")
            ax.set_xlabel("DDTREE budget (tree nodes verified per round)")
            ax.set_ylabel(label)
            ax.set_title(f"trained pair, T={temp:g}")
            ax.legend(fontsize=7)
            ax.grid(alpha=0.3, which="both")
        fname = f"{prefix}-{name}.png"
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)
        written.append(fname)
    return written


def write(out_dir: Path, meta: dict, records: list[dict]) -> Path:
    """docs-style markdown + plots into out_dir; returns the markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    prows, brows = pair_rows(records), big_rows(records)
    default_rows = [r for r in prows if not r.get("variant")]  # variants are in the tables, not the plots
    pngs = plots(default_rows, out_dir) if default_rows else []
    lines = ["# End-to-end benchmark: plain / DFLASH / DDTREE on a trained pair and an 8B-shape target", "",
             f"Machine: {meta['machine']}. SGLang {meta['sglang']} (gpurig bundle) patched by "
             "`python -m ddtree_patch apply`; torch " + meta["torch"] + ".", "",
             "Command (device tool, `carry: [\".gpurig\"]`):", "", f"    {meta['command']}", "",
             f"Run: {meta['started']} UTC, {meta['wall_s']:.0f} s wall. Phases finished: "
             f"{', '.join(meta['finished']) or 'none'}; not finished (the deadline, or engines that did not start: "
             f"see Failures): {', '.join(meta['cut']) or 'none'}.",
             "", "## Goals (issue 9)", "", *goals(prows, brows), *greedy_check(prows), "",
             "## Goals (issue 49, a strong pair)", "", *strong_pair_goals(prows), "",
             "## Goals (issue 48, budget auto)", "", *auto_budget_goals(records), "",
             "## How it was measured", "", *meta["method"], ""]
    if meta.get("pair"):
        lines += ["## The trained pair", "", *meta["pair"], ""]
    for temp in sorted({r["temperature"] for r in prows}):
        judged = any(r["temperature"] == temp and r.get("tie_diffs") is not None for r in prows)
        lines += [f"## Trained pair, T={temp:g}", "",
                  "Median over repeats, (min-max) across repeats; `x plain` / `x DFLASH` are medians of "
                  "per-repeat tokens/s ratios against the run of that config in the same repeat. "
                  "`= plain`: prompts whose greedy output is identical to plain decoding's at the same batch size "
                  "(first repeat; bf16 near-ties can flip a token legitimately)." + (JUDGED if judged else ""), "",
                  *pair_table(prows, temp), ""]
    for png in pngs:
        lines += [f"![{png}]({png})", ""]
    if brows:
        lines += ["## 8B shape: round time at equal verify width", "", *meta.get("big", []), "",
                  *big_table(brows), ""]
    if meta.get("warnings"):
        lines += ["## Warnings in the engine logs", "", *[f"- `{w}`" for w in meta["warnings"]], ""]
    if meta.get("failures"):
        lines += ["## Failures", "", *[f"- {f}" for f in meta["failures"]], ""]
    md = out_dir / "benchmarks.md"
    md.write_text("\n".join(lines))
    return md
