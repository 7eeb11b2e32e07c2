"""The comparison table, its reference rates, and the issue's targets checked against a run."""

from __future__ import annotations

from typing import Any

from benchmarks.systems import SYSTEMS

# A row whose median pass rate beats its rate over the whole run (after the first batch) by more
# than this had work done ahead during the warm-up (a deep prefetch): its passes flatter it.
RUN_AHEAD = 1.25


def row_name(result: dict[str, Any]) -> str:
    parallel = SYSTEMS[result["system"]].parallel
    return f"{result['system']} ({result['workers']}w)" if parallel else result["system"]


def summarise(results: list[dict[str, Any]], cores: int) -> dict[str, Any]:
    """Reference rates: bare loop, CPU limit, best anchor (same Python fn), tpufeed by workers."""
    ok = [r for r in results if "rate" in r]
    bare = next((r["rate"] for r in ok if r["system"] == "bare-loop"), None)
    anchors = [r for r in ok if SYSTEMS[r["system"]].kind == "anchor"]
    best = max(anchors, key=lambda r: r["rate"], default=None)
    side_by_side = next((r["rate"] for r in ok if r["system"] == "bare-parallel"), None)
    return {
        "bare_loop": bare,
        "cores": cores,
        "cpu_limit": bare * cores if bare else None,
        "bare_parallel": side_by_side,
        "best_anchor": row_name(best) if best else None,
        "best_anchor_rate": best["rate"] if best else None,
        "best_anchor_pss_mib": best.get("pss_all_mib") if best else None,
        "tpufeed": {str(r["workers"]): r["rate"] for r in ok if r["system"] == "tpufeed"},
    }


def format_table(workload: str, results: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    """A markdown table, one line per row, with the W2 CPU limit under the bare loop."""
    bare, best = summary["bare_loop"], summary["best_anchor_rate"]
    head = [
        "row",
        "kind",
        "records/s",
        "spread",
        "vs bare",
        "vs best anchor",
        "first 50k rec/s",
        "first batch s",
        "import s",
        "RSS main MiB",
        "RSS child MiB",
        "PSS all MiB",
        "load",
    ]
    lines = []
    for r in results:
        kind = SYSTEMS[r["system"]].kind
        if "rate" not in r:
            lines.append(
                [row_name(r), kind, "ERROR: " + r["error"].splitlines()[0][:60]] + [""] * 10
            )
            continue
        ahead = r["rate"] > RUN_AHEAD * r["rate_after_first_batch"]
        lines.append(
            [
                row_name(r),
                kind,
                f"{r['rate']:,.0f}" + (" †" if ahead else ""),
                f"{r['spread']:.0%}",
                _ratio(r["rate"], bare),
                _ratio(r["rate"], best),
                f"{r['rate_early']:,.0f}" if r.get("rate_early") else "-",
                f"{r['first_batch_s']:.3f}",
                f"{r['import_s']:.2f}",
                _mib(r["rss_main_mib"]),
                _mib(r["rss_worker_mib"]),
                _mib(r.get("pss_all_mib")),
                f"{r['load_at_start']:.1f}",
            ]
        )
        if r["system"] == "bare-loop" and workload == "W2":
            limit = summary["cpu_limit"]
            lines.append(
                [
                    f"CPU limit (bare x {summary['cores']} cores)",
                    "limit",
                    f"{limit:,.0f}",
                    "",
                    _ratio(limit, bare),
                    _ratio(limit, best),
                ]
                + [""] * 7
            )
    out = [f"| {' | '.join(head)} |", "|" + "|".join(" --- " for _ in head) + "|"]
    out += [f"| {' | '.join(line)} |" for line in lines]
    if any("†" in line[2] for line in lines):
        out.append(
            f"\n† median pass rate > {RUN_AHEAD}x the rate over the whole run after the "
            "first batch: work was done ahead during the warm-up (see rate_after_first_batch)"
        )
    return "\n".join(out)


def check_targets(
    workload: str, results: list[dict[str, Any]], summary: dict[str, Any]
) -> list[tuple[str, str, bool | None]]:
    """The targets (issues 3 and 15) as (target, measured, met); met is None when a row is
    missing. "early": the first 50,000 records after the first batch."""
    rows = {(r["system"], r["workers"]): r for r in results if "rate" in r}
    tpufeed = [r for (system, _), r in rows.items() if system == "tpufeed"]
    best_tpufeed = max(tpufeed, key=lambda r: r["rate"], default=None)
    parallel = [r for r in tpufeed if r["workers"] > 0]
    bare, best = summary["bare_loop"], summary["best_anchor_rate"]
    out: list[tuple[str, str, bool | None]] = []

    def ratio(name: str, rate: float | None, base: float | None, goal: float) -> None:
        if rate is None or not base:
            out.append((name, "missing row", None))
        else:
            out.append((name, f"{rate / base:.2f}", rate / base >= goal))

    def early(row: dict[str, Any] | None) -> float | None:
        return row.get("rate_early") if row else None

    zero = rows.get(("tpufeed", 0))
    workers = max(parallel, key=lambda r: r["workers"], default=None)
    torch = [r for (system, _), r in rows.items() if system == "torch"]
    best_torch = max(torch, key=lambda r: r["rate"], default=None)
    if workload == "W1":
        ratio("tpufeed 0w >= 0.9x bare loop", zero and zero["rate"], bare, 0.9)
        ratio("best tpufeed >= 1.2x best anchor", best_tpufeed and best_tpufeed["rate"], best, 1.2)
        ratio(
            "best tpufeed >= 1.2x best torch",
            best_tpufeed and best_tpufeed["rate"],
            best_torch and best_torch["rate"],
            1.2,
        )
        best_early = max((early(r) or 0 for r in tpufeed), default=None)
        torch_early = max((early(r) or 0 for r in torch), default=None)
        ratio("best tpufeed >= 1.2x best torch, early", best_early, torch_early, 1.2)
        if workers is not None:
            ttfb = workers["first_batch_s"]
            out.append(
                (
                    f"tpufeed {workers['workers']}w first batch <= 0.3 s",
                    f"{ttfb:.3f} s",
                    ttfb <= 0.3,
                )
            )
        for n in sorted({w for (system, w) in rows if system == "streaming-mds"}):
            mds, streaming = rows.get(("tpufeed-mds", n)), rows[("streaming-mds", n)]
            ratio(
                f"tpufeed-mds {n}w >= 1.2x streaming-mds {n}w",
                mds and mds["rate"],
                streaming["rate"],
                1.2,
            )
    else:
        ratio(
            "tpufeed Nw >= 0.85x CPU limit", workers and workers["rate"], summary["cpu_limit"], 0.85
        )
        ratio("tpufeed Nw >= 1.3x best anchor", workers and workers["rate"], best, 1.3)
        torch_n = rows.get(("torch", workers["workers"])) if workers else None
        ratio(
            "tpufeed Nw >= 1.2x torch Nw",
            workers and workers["rate"],
            torch_n and torch_n["rate"],
            1.2,
        )
        ratio(
            "tpufeed Nw >= 0.9x bare-parallel",
            workers and workers["rate"],
            summary.get("bare_parallel"),
            0.9,
        )
        side_by_side = summary.get("bare_parallel")
        if workers is not None and side_by_side:  # context, not a target
            out.append(
                (
                    "(N bare loops side by side / CPU limit)",
                    f"{side_by_side / summary['cpu_limit']:.2f}",
                    None,
                )
            )
    for row in sorted(parallel, key=lambda r: r["workers"]):  # workers never lose
        ratio(f"tpufeed {row['workers']}w >= tpufeed 0w", row["rate"], zero and zero["rate"], 1.0)
        ratio(f"tpufeed {row['workers']}w >= tpufeed 0w, early", early(row), early(zero), 1.0)
    pair = [  # issue 31: the same tar shards read by tpufeed in place and by WebDataset
        max((r for (system, _), r in rows.items() if system == name), key=lambda r: r["rate"])
        if any(system == name for system, _ in rows)
        else None
        for name in ("tpufeed-tar", "wds")
    ]
    if any(pair):
        ratio("best tpufeed-tar >= 1.2x best wds", *(r and r["rate"] for r in pair), 1.2)
    auto = rows.get(("tpufeed-auto", 0))
    if auto is not None and best_tpufeed is not None:
        ratio("tpufeed-auto >= 0.9x best fixed tpufeed", auto["rate"], best_tpufeed["rate"], 0.9)
    pss, anchor_pss = (
        best_tpufeed and best_tpufeed.get("pss_all_mib"),
        summary["best_anchor_pss_mib"],
    )
    if pss and anchor_pss:
        out.append(
            (
                "best tpufeed PSS <= best anchor's",
                f"{pss:.0f} vs {anchor_pss:.0f} MiB",
                pss <= anchor_pss,
            )
        )
    return out


def format_targets(targets: list[tuple[str, str, bool | None]]) -> str:
    marks = {True: "met", False: "NOT met", None: "-"}
    return "\n".join(f"  {name:<44} {value:<22} {marks[met]}" for name, value, met in targets)


def _ratio(rate: float | None, base: float | None) -> str:
    return f"{rate / base:.2f}x" if rate and base else "-"


def _mib(value: float | None) -> str:
    return f"{value:.0f}" if value else "-"
