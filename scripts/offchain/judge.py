"""Verdicts for the off-chain oracle rows of the GPU matrix (scripts/gpu/matrix.py --suite offchain).

- plain_offchain must follow the oracle's rule (two back, plus two) on every prompt, batched and
  alone: otherwise the hand-built target misbehaves on this GPU and nothing else can be judged.
- DFLASH / DDTREE: greedy output equal to plain, batched and alone (no near-tie allowance: every
  logit margin is 20+); accepted tokens per round (SGLang's spec_accept_length, mean over the batch's
  requests) within ACCEPT_TOLERANCE of the analytic value (scripts/offchain/acceptance.py); DDTREE's above
  DFLASH's measured with the same CUDA-graph setting.
"""

from __future__ import annotations

from scripts.offchain.oracle import continuation

ACCEPT_TOLERANCE = 0.02


def _diffs(ref: list[list[int]], got: list[list[int]]) -> list[tuple[int, int]]:
    out = []
    for i, (a, b) in enumerate(zip(ref, got)):
        if a != b:
            out.append((i, next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))))
    if len(ref) != len(got):
        out.append((min(len(ref), len(got)), -1))
    return out


def measured_accept(res: dict) -> list[float | None]:
    return [m.get("spec_accept_length") for m in res.get("meta", [])]


def _mean(values: list[float | None]) -> float | None:
    return round(sum(values) / len(values), 4) if values and None not in values else None


def expectations(cfgs: list[dict]) -> dict[str, dict]:
    """Analytic acceptance per config name (DFLASH / DDTREE rows only)."""
    from scripts.offchain.acceptance import expected_acceptance  # the repo's kernels (Triton import)

    out = {}
    for cfg in cfgs:
        if cfg["algo"] in ("DFLASH", "DDTREE"):
            budget = cfg.get("analytic_budget", cfg.get("budget"))  # an `auto` row: the budget its rounds verify
            out[cfg["name"]] = expected_acceptance(cfg["prompts"], cfg["max_new"], cfg["algo"], budget)
    return out


def judge_reference(cfg: dict, res: dict) -> dict:
    if not res.get("ok"):
        return {"ok": False, "verdict": "ERROR", "error": res.get("error")}
    want = [continuation(p, cfg["max_new"]) for p in cfg["prompts"]]
    wrong = [{"run": kind[:-4], "prompt": p, "pos": pos, "plain": res[kind][p][pos:pos + 4] if pos >= 0 else None,
              "rule": want[p][pos:pos + 4] if pos >= 0 else None}
             for kind in ("batch_ids", "single_ids") for p, pos in _diffs(want, res[kind])]
    row = {"ok": True, "verdict": "REFERENCE" if not wrong else "FAIL", "bug_diffs": wrong}
    if wrong:
        row["error"] = ("ORACLE BROKEN: plain decoding of target_offchain does not follow its rule "
                        "(two back, plus two), so no off-chain row can be judged")
    return row


def judge(cfg: dict, res: dict, plain: dict | None, plain_row: dict | None, expected: dict | None,
          dflash: dict | None) -> dict:
    """One DFLASH / DDTREE row; `dflash` is the DFLASH result with the same CUDA-graph setting."""
    row = {"ok": bool(res.get("ok"))}
    if not res.get("ok") or not plain or not plain.get("ok"):
        row["verdict"] = "ERROR" if not res.get("ok") else "NO REFERENCE"
        row["error"] = res.get("error") or (plain or {}).get("error")
        return row
    bugs = [{"run": kind[:-4], "prompt": p, "pos": pos}
            for kind in ("batch_ids", "single_ids") for p, pos in _diffs(plain[kind], res[kind])]
    per_request = measured_accept(res)
    mean = _mean(per_request)
    row.update(batch_equal=plain["batch_ids"] == res["batch_ids"], single_equal=plain["single_ids"] == res["single_ids"],
               tie_diffs=[], bug_diffs=bugs, accept_per_round=mean, accept_per_request=per_request)
    problems = []
    if (plain_row or {}).get("verdict") != "REFERENCE":
        problems.append("plain_offchain does not follow the oracle's rule (see its row)")
    if bugs:
        problems.append(f"output differs from plain at {len(bugs)} (run, prompt) pairs")
    if expected is None:
        problems.append("no analytic value")
    else:
        row.update(analytic=expected["mean"], analytic_per_request=expected["per_request"],
                   rounds_analytic=expected["rounds"], off_chain_rounds=expected["off_chain_rounds"],
                   kv_move_rounds=expected["kv_move_rounds"])
        if mean is None:
            problems.append(f"no spec_accept_length for every request: {per_request}")
        else:
            row["diff"] = round(mean / expected["mean"] - 1, 4)
            detail = f"per request measured {per_request}, analytic {expected['per_request']}"
            if abs(row["diff"]) > ACCEPT_TOLERANCE:
                problems.append(f"accepted tokens / round {mean} vs analytic {expected['mean']} ({row['diff']:+.1%}); "
                                + detail)
            elif any(abs(m - e) > 1e-3 for m, e in zip(per_request, expected["per_request"])):
                row["notes"] = [f"within tolerance, but the deterministic oracle predicts every request exactly: {detail}"]
    if cfg["algo"] == "DDTREE":
        base = _mean(measured_accept(dflash)) if dflash and dflash.get("ok") else None
        row["dflash"] = base
        if base is None:
            problems.append("no DFLASH measurement to compare with")
        elif mean is not None and not base < mean:
            problems.append(f"DFLASH accepts {base} tokens / round, not fewer than DDTREE's {mean}")
    row["problems"] = problems
    row["verdict"] = "PASS" if not problems else "FAIL"
    return row


def table(rows: dict[str, dict], max_new: int, n_prompts: int) -> list[str]:
    """The off-chain table: measured vs analytic accepted tokens per round, and how often (by the
    analytic walk) the accepted path left the first-child chain / needed a KV move."""
    lines = ["", f"Off-chain oracle (target_offchain + draft_offchain, {n_prompts} prompts batched, {max_new} new "
                 "tokens): accepted tokens / round, measured vs analytic (tolerance "
                 f"{ACCEPT_TOLERANCE:.0%}); rounds whose accepted path leaves the first-child chain / needs a KV "
                 "move (analytic, of all rounds)",
             "", "| config | verdict | measured | analytic | diff | DFLASH measured | off first-child chain | KV moved |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        diff = f"{row['diff']:+.2%}" if "diff" in row else ""
        rounds = row.get("rounds_analytic", "")
        chain = f"{row['off_chain_rounds']} / {rounds}" if "off_chain_rounds" in row else ""
        moved = f"{row['kv_move_rounds']} / {rounds}" if "kv_move_rounds" in row else ""
        lines.append(f"| {name} | {row['verdict']} | {row.get('accept_per_round', '')} | {row.get('analytic', '')} "
                     f"| {diff} | {row.get('dflash', '') if row.get('dflash') is not None else ''} | {chain} | {moved} |")
    for name, row in rows.items():
        for problem in row.get("problems", []):
            lines.append(f"- {name}: {problem}")
        for note in row.get("notes", []):
            lines.append(f"- note, {name}: {note}")
    return lines
