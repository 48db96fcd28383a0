"""The benchmark report compares like with like: every pub/sub row states its loss, and
a ratio whose baseline (or aoz side) lost messages is printed as ``n/a``, not a number.

Synthetic results only: nothing is run or timed here.
"""

from __future__ import annotations

from typing import Any

from benchmarks.__main__ import (
    LOSSLESS_SYSTEMS,
    PUBSUB_SYSTEMS,
    RATIOS,
    compute_ratios,
    loss_cell,
    loss_summary,
    ratio_row,
    summarize,
    tables,
)
from benchmarks.harness import DROPPING_SYSTEMS


def _report(losses: dict[str, float], rates: dict[str, float], n: int = 100_000) -> dict[str, Any]:
    """Three rounds of 100 B pub/sub with the given loss and rate per system."""
    rounds: dict[str, dict[str, list[float | None]]] = {}
    details: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for system, rate in rates.items():
        loss = losses.get(system, 0.0)
        received = n - round(n * loss)
        for _ in range(3):
            rounds.setdefault("pubsub_100B", {}).setdefault(system, []).append(rate)
            rounds.setdefault("loss_100B", {}).setdefault(system, []).append((n - received) / n)
            details.setdefault("pubsub_100B", {}).setdefault(system, []).append(
                {"sent": n, "received": received, "loss": (n - received) / n}
            )
    figures = {
        fig: {s: summarize([v for v in vals if v is not None]) for s, vals in per.items()}
        for fig, per in rounds.items()
    }
    return {
        "config": {"sizes": ["100B"]},
        "figures": figures,
        "details": details,
        "loss": loss_summary(details),
        "ratios": compute_ratios(rounds),
    }


def _table(report: dict[str, Any], title_start: str) -> tuple[list[str], list[list[str]]]:
    for title, header, rows in tables(report):
        if title.startswith(title_start):
            return header, rows
    raise AssertionError(f"no table {title_start!r}")


def _ratio_value(report: dict[str, Any], label_start: str) -> str:
    _, rows = _table(report, "aoz ratios")
    for row in rows:
        if row[0].startswith(label_start):
            return row[1]
    raise AssertionError(f"no ratio {label_start!r}")


RATES = {"aoz": 500_000.0, "aoz-wild": 450_000.0, "zenoh": 1_000_000.0,
         "zmq.asyncio": 800_000.0, "aoz-drop": 600_000.0, "zenoh-drop": 1_200_000.0}


def test_pubsub_tables_have_a_loss_column_per_size() -> None:
    report = _report({"zenoh-drop": 0.377, "aoz-drop": 0.1}, RATES)
    header, rows = _table(report, "Pub/sub throughput, lossless")
    assert header == ["system", "100 B msg/s", "100 B loss (lost of sent)"]
    by_system = {r[0]: r for r in rows}
    assert by_system["zenoh"][2] == "0.00% (0 of 300,000)"
    assert "zenoh-drop" not in by_system and "aoz-drop" not in by_system
    header, rows = _table(report, "Pub/sub throughput, dropping")
    assert "100 B loss (lost of sent)" in header
    by_system = {r[0]: r for r in rows}
    assert by_system["zenoh-drop"][2] == "37.70% (113,100 of 300,000)"
    assert by_system["aoz-drop"][2] == "10.00% (30,000 of 300,000)"
    assert report["loss"]["100B"]["zenoh-drop"]["lost"] == 113_100
    assert report["loss"]["100B"]["zenoh-drop"]["lossless_config"] is False


def test_lossless_baselines_give_ratios() -> None:
    report = _report({}, RATES)
    value = _ratio_value(report, "aoz async-for (exact) / zenoh BLOCK, 100 B")
    assert value == "0.50x [0.50x-0.50x]"
    assert report["ratios"]["iter_vs_zenoh_100B"]["median"] == 0.5


def test_a_lossy_baseline_is_not_printed_as_a_ratio() -> None:
    report = _report({"zenoh": 0.377}, RATES)
    assert _ratio_value(report, "aoz async-for (exact) / zenoh BLOCK, 100 B") == (
        "n/a (baseline lost 37.7%)"
    )
    ratio = report["ratios"]["iter_vs_zenoh_100B"]
    assert ratio["median"] is None and ratio["meets"] is None
    # the other baseline was lossless: its ratio stays
    assert report["ratios"]["iter_vs_zmqasyncio_100B"]["median"] == 0.625


def test_a_lossy_aoz_side_is_not_printed_as_a_ratio() -> None:
    report = _report({"aoz": 0.1}, RATES)
    assert _ratio_value(report, "aoz async-for (exact) / zmq.asyncio, 100 B") == (
        "n/a (aoz side lost 10.0%)"
    )


def test_loss_up_to_a_tenth_of_a_percent_keeps_the_ratio() -> None:
    assert _report({"zenoh": 0.001}, RATES)["ratios"]["iter_vs_zenoh_100B"]["median"] == 0.5
    assert _report({"zenoh": 0.0011}, RATES)["ratios"]["iter_vs_zenoh_100B"]["median"] is None


def test_no_dropping_system_is_a_baseline() -> None:
    assert set(PUBSUB_SYSTEMS) >= DROPPING_SYSTEMS
    assert not DROPPING_SYSTEMS & set(LOSSLESS_SYSTEMS)
    for key, _label, _num, (_fig, den), _op, _target in RATIOS:
        assert den not in DROPPING_SYSTEMS, key


def test_cells() -> None:
    assert loss_cell([]) == "-"
    assert loss_cell([{"sent": 10, "received": 9}, {"sent": 10, "received": 10}]) == (
        "5.00% (1 of 20)"
    )
    skipped = {"label": "x", "target": "", "skipped": True, "na": "", "meets": None}
    assert ratio_row(skipped)[1:] == ["-", "", "skipped"]


def test_runs_side_by_side_keep_the_loss_and_the_na() -> None:
    from benchmarks.runs import markdown

    runs = []
    for zenoh_loss in (0.0, 0.377):
        rep = _report({"zenoh": zenoh_loss}, RATES)
        rep.update(started_utc="2026-11-25T19:00:00+00:00", duration_s=300.0,
                   machine={"loadavg_start": [9.0, 7.0, 5.0], "loadavg_end": [17.0, 11.0, 8.0]},
                   versions={"aoz-git": "abc1234"})
        runs.append(rep)
    md = markdown(runs)
    row = next(ln for ln in md.splitlines()
               if ln.startswith("| aoz async-for (exact) / zenoh BLOCK, 100 B"))
    assert "| 0.50x | n/a (baseline lost 37.7%) | 1 of 2 runs n/a or missing |" in row
    assert "| zenoh | 18.85% (113,100 of 600,000) |" in md
    assert "load average 9.0, 7.0, 5.0 at start" in md
