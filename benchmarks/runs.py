"""``python -m benchmarks.runs RESULTS.json [RESULTS.json ...]``: several runs of
``python -m benchmarks`` side by side, as markdown.

For each ratio: every run's median, then the median and min-max over the runs' medians
(``n/a (...)`` where a run's side lost more than 0.1%). For each pub/sub system and size:
its loss over every round of every run. Then each run's start time and load averages.
What the README's benchmark table and ``benchmarks/RESULTS.md`` quote.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from .__main__ import PUBSUB_SYSTEMS, SIZE_LABELS, fmt


def _ratio_cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if r.get("skipped"):
        return "skipped"
    if r.get("na"):
        return str(r["na"])
    return fmt(r.get("median"), "ratio")


def ratio_rows(reports: list[dict[str, Any]]) -> list[list[str]]:
    keys: list[str] = []
    for rep in reports:
        keys += [k for k in rep["ratios"] if k not in keys]
    rows = []
    for key in keys:
        per = [rep["ratios"].get(key) for rep in reports]
        label = next(r["label"] for r in per if r is not None)
        target = next((r["target"] for r in per if r is not None and r["target"]), "")
        meds = [r["median"] for r in per if r is not None and r.get("median") is not None]
        if len(meds) == len(per):
            summary = (
                f"{fmt(statistics.median(meds), 'ratio')} "
                f"[{fmt(min(meds), 'ratio')}-{fmt(max(meds), 'ratio')}]"
            )
        elif meds:
            summary = f"{len(per) - len(meds)} of {len(per)} runs n/a or missing"
        else:
            summary = "n/a"
        rows.append([label, *(_ratio_cell(r) for r in per), summary, target])
    return rows


def rate_rows(reports: list[dict[str, Any]]) -> list[list[str]]:
    """Per system and size: the median of the runs' medians [their min-max], msg/s."""
    sizes = [s for s in SIZE_LABELS if any(f"pubsub_{s}" in rep["figures"] for rep in reports)]
    rows = []
    for system in PUBSUB_SYSTEMS:
        row = [system]
        for size in sizes:
            meds = [
                v
                for rep in reports
                if (v := rep["figures"].get(f"pubsub_{size}", {}).get(system, {}).get("median"))
            ]
            row.append(
                f"{fmt(statistics.median(meds), 'rate')} "
                f"[{fmt(min(meds), 'rate')}-{fmt(max(meds), 'rate')}]"
                if meds
                else "-"
            )
        if any(c != "-" for c in row[1:]):
            rows.append(row)
    return [["system", *(SIZE_LABELS[s] for s in sizes)], *rows]


def loss_rows(reports: list[dict[str, Any]]) -> list[list[str]]:
    sizes = [s for s in SIZE_LABELS if any(s in rep.get("loss", {}) for rep in reports)]
    rows = []
    for system in PUBSUB_SYSTEMS:
        row = [system]
        seen = False
        for size in sizes:
            sent = lost = 0
            for rep in reports:
                x = rep.get("loss", {}).get(size, {}).get(system)
                if x:
                    sent += x["sent"]
                    lost += x["lost"]
            seen = seen or sent > 0
            row.append(f"{lost / sent * 100:.2f}% ({lost:,} of {sent:,})" if sent else "-")
        if seen:
            rows.append(row)
    return [["system", *(SIZE_LABELS[s] for s in sizes)], *rows]


def markdown(reports: list[dict[str, Any]]) -> str:
    n = len(reports)
    out = ["| ratio | " + " | ".join(f"run {i + 1}" for i in range(n))
           + " | median [range] over runs | target |",
           "|" + "---|" * (n + 3)]
    out += ["| " + " | ".join(r) + " |" for r in ratio_rows(reports)]
    rates = rate_rows(reports)
    out += ["", "msg/s at the subscriber, median of the runs' medians [their min-max]:", "",
            "| " + " | ".join(rates[0]) + " |", "|" + "---|" * len(rates[0])]
    out += ["| " + " | ".join(r) + " |" for r in rates[1:]]
    loss = loss_rows(reports)
    out += ["", "Loss over every round of every run (lost of sent):", "",
            "| " + " | ".join(loss[0]) + " |", "|" + "---|" * len(loss[0])]
    out += ["| " + " | ".join(r) + " |" for r in loss[1:]]
    out += [""]
    for i, rep in enumerate(reports):
        m = rep["machine"]
        out.append(
            f"- run {i + 1}: {rep['started_utc']}, {rep['duration_s']:.0f} s, load average "
            f"{', '.join(f'{x:.1f}' for x in m['loadavg_start'])} at start, "
            f"{', '.join(f'{x:.1f}' for x in m['loadavg_end'])} at end; "
            f"aoz {rep['versions'].get('aoz-git', '?')}"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        raise SystemExit(__doc__)
    reports = [json.loads(Path(p).read_text()) for p in paths]
    sys.stdout.write(markdown(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
