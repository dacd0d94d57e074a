"""The tuning report's picture: goodput and p99 TPOT against concurrency per candidate, the SLO line and each knee."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any


def plot(host: str, scene: str, result: dict[str, Any], p99_tpot_ms: float, path: Path) -> None:
    """Draw the sweep of every candidate that ran into path (.svg or .png): goodput above, p99 TPOT below with the
    SLO's line; each knee is ringed. Every line has an SVG id, goodput-<candidate> and tpot-<candidate>."""
    import matplotlib  # imported here: only the tuner draws, and the backend must be chosen before pyplot loads

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (top, bottom) = pyplot.subplots(2, 1, sharex=True, figsize=(8, 7))
    for candidate in result["candidates"]:
        steps = candidate.get("steps") or []
        if not steps:
            continue
        levels = [s["concurrency"] for s in steps]
        label = candidate["name"] + (" (winner)" if candidate["name"] == result.get("winner") else "")
        line, = top.plot(levels, [s["goodput"] for s in steps], marker="o", label=label)
        line.set_gid(f"goodput-{candidate['name']}")
        tpot, = bottom.plot(levels, [float(s["p99_tpot_ms"] or 0) for s in steps], marker="o", label=label,
                            color=line.get_color())
        tpot.set_gid(f"tpot-{candidate['name']}")
        if candidate.get("knee"):
            knee = candidate["knee"]
            top.scatter([knee["concurrency"]], [knee["goodput"]], s=220, facecolors="none",
                        edgecolors=line.get_color(), linewidths=2, gid=f"knee-{candidate['name']}")
    bottom.axhline(p99_tpot_ms, color="red", linestyle="--", label=f"SLO p99 TPOT {p99_tpot_ms:g} ms", gid="slo")
    top.set_ylabel("goodput (output tok/s within the SLO)")
    bottom.set_ylabel("p99 TPOT (ms)")
    bottom.set_xlabel("concurrency (requests in flight)")
    bottom.set_xscale("log", base=2)
    top.set_title(textwrap.fill(f"{scene} on {host}: {result['message']}", 110), fontsize=9)
    top.legend(fontsize=8)
    bottom.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def main(argv: list[str] | None = None) -> None:
    """Draw a tuning report (JSON, as playbooks/tune.yml writes it) into each picture path given after it."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("report", type=Path)
    parser.add_argument("pictures", type=Path, nargs="+", help=".png or .svg")
    args = parser.parse_args(argv)
    result = json.loads(args.report.read_text())
    for picture in args.pictures:
        plot(result["host"], result["scene"], result, float(result["slo"]["p99_tpot_ms"]), picture)


if __name__ == "__main__":
    main()
