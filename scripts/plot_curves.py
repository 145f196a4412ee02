"""Learning curves from TensorBoard event files as an SVG picture (no plotting library needed).

    python scripts/plot_curves.py --tag train/episode_reward \\
        --title "IMPALA, PongNoFrameskip-v4, 2 actors" --out docs/curves/impala_pong.svg \\
        /tmp/impala_pong:seed0 /tmp/impala_pong_1:seed1

    python scripts/plot_curves.py --record docs/results/qmix_Foraging-8x8-2p-2f-coop-v3.json \\
        --out docs/curves/qmix_Foraging-8x8-2p-2f-coop-v3.svg

Each positional argument is a log folder (what ``parl.utils.summary.set_dir`` got, searched
recursively for event files), optionally ``:label``. Every run becomes one line of ``tag``
against the step, smoothed by a moving average of ``--smooth`` points (after ``--bin``, which
first averages each bin of that many steps: a per-episode tag becomes one point per bin).
``--record`` draws a results record's evaluations instead, a line per seed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import textwrap
from collections.abc import Sequence
from html import escape
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # results_summary, for --record

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 50  # margins around the plot area
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")

Series = list[tuple[float, float]]


def read_scalars(folder: str, tag: str) -> Series:
    """``(step, value)`` of ``tag`` in every event file under ``folder``, sorted by step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points: Series = []
    for root, _, files in os.walk(folder):
        for name in files:
            if "tfevents" not in name:
                continue
            events = EventAccumulator(os.path.join(root, name), size_guidance={"scalars": 0})
            events.Reload()
            if tag in events.Tags()["scalars"]:
                points += [(e.step, e.value) for e in events.Scalars(tag)]
    if not points:
        raise SystemExit(f"no scalar {tag!r} in any event file under {folder}")
    return sorted(points)


def bin_points(points: Series, width: int) -> Series:
    """The mean of the points in each bin of ``width`` steps, at the bin's last step:
    ``(1000, mean of steps 1-1000)``, ``(2000, mean of steps 1001-2000)``, ..."""
    sums: dict[int, list[float]] = {}
    for step, value in points:
        entry = sums.setdefault(int(math.ceil(step / width)), [0.0, 0])
        entry[0] += value
        entry[1] += 1
    return [(index * width, total / count) for index, (total, count) in sorted(sums.items())]


def smooth(points: Series, window: int) -> Series:
    """Moving average over the last ``window`` points (the first ones over fewer)."""
    out, total = [], 0.0
    for i, (step, value) in enumerate(points):
        total += value
        if i >= window:
            total -= points[i - window][1]
        out.append((step, total / min(i + 1, window)))
    return out


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering ``[low, high]``."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    return [first + i * step for i in range(int(math.ceil((high - first) / step)) + 1)]


def _label(value: float) -> str:
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def render(
    runs: Sequence[tuple[str, Series]], title: str, x_title: str, y_title: str,
    subtitle: str = "",
) -> str:  # fmt: skip
    """The SVG text of the runs' lines on shared axes, with ticks, titles and a legend.

    A long title or ``subtitle`` (what tells one configuration's picture from another's) wraps
    onto more lines above the plot; a long ``y_title`` onto at most two lines beside it."""
    xs = [x for _, points in runs for x, _ in points]
    ys = [y for _, points in runs for _, y in points]
    x_ticks, y_ticks = nice_ticks(min(xs), max(xs)), nice_ticks(min(ys), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    heads = [(line, 15) for line in textwrap.wrap(title, 72)]
    heads += [(line, 12) for line in textwrap.wrap(subtitle, 96)]
    top = TOP + 18 * max(len(heads) - 1, 0)  # each line past the first pushes the plot down
    height = HEIGHT + top - TOP
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    # at 12 px a character is about 6.5 px wide: the lines that fit along the plot's height
    y_lines = textwrap.wrap(y_title, int(plot_h / 6.5))
    if len(y_lines) > 2:
        y_lines = y_lines[:1] + [textwrap.shorten(" ".join(y_lines[1:]), int(plot_h / 6.5))]

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return top + (y1 - y) / (y1 - y0) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    for i, (line, size) in enumerate(heads):
        parts.append(f'<text x="{WIDTH / 2}" y="{22 + 18 * i}" text-anchor="middle" '
                     f'font-size="{size}">{escape(line)}</text>')  # fmt: skip
    for x in x_ticks:
        parts.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{top + plot_h}" '
                     'stroke="#ddd"/>')  # fmt: skip
        parts.append(f'<text x="{px(x):.1f}" y="{top + plot_h + 16}" '
                     f'text-anchor="middle">{_label(x)}</text>')  # fmt: skip
    for y in y_ticks:
        parts.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + plot_w}" y2="{py(y):.1f}" '
                     'stroke="#ddd"/>')  # fmt: skip
        parts.append(f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" '
                     f'text-anchor="end">{_label(y)}</text>')  # fmt: skip
    parts.append(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" '
                 'stroke="#444"/>')  # fmt: skip
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{height - 12}" '
                 f'text-anchor="middle">{escape(x_title)}</text>')  # fmt: skip
    for i, line in enumerate(y_lines):
        parts.append(f'<text transform="translate({16 + 14 * i} {top + plot_h / 2}) rotate(-90)" '
                     f'text-anchor="middle">{escape(line)}</text>')  # fmt: skip
    for i, (label, points) in enumerate(runs):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                     'stroke-width="1.8"/>')  # fmt: skip
        ly = top + 14 + 16 * i
        parts.append(f'<line x1="{LEFT + 10}" y1="{ly - 4}" x2="{LEFT + 30}" y2="{ly - 4}" '
                     f'stroke="{colour}" stroke-width="2"/>')  # fmt: skip
        parts.append(f'<text x="{LEFT + 36}" y="{ly}">{escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", help="log folder, optionally folder:label")
    parser.add_argument(
        "--record", default=None,
        help="draw a record's evaluations (docs/results/*.json) instead of log folders",
    )  # fmt: skip
    parser.add_argument("--tag", default="train/episode_reward")
    parser.add_argument("--title", default="")
    parser.add_argument("--x_title", default="environment steps")
    parser.add_argument("--y_title", default=None, help="default: the tag")
    parser.add_argument("--smooth", type=int, default=1, help="moving-average window (points)")
    parser.add_argument(
        "--bin", type=int, default=0, help="average the points of each bin of this many steps"
    )
    parser.add_argument("--out", required=True, help="the SVG file to write")
    args = parser.parse_args(argv)
    if args.record:
        if args.runs:
            parser.error("give either --record or log folders, not both")
        write_record_svg(args.out, args.record)
        return
    if not args.runs:
        parser.error("give log folders to draw, or --record")
    runs = []
    for spec in args.runs:
        folder, _, label = spec.partition(":")
        points = read_scalars(folder, args.tag)
        if args.bin:
            points = bin_points(points, args.bin)
        runs.append((label or os.path.basename(folder.rstrip("/")), smooth(points, args.smooth)))
    write_svg(args.out, runs, args.title, args.x_title, args.y_title or args.tag)


def write_record_svg(out: str, path: str) -> None:
    """Draw the evaluations of a results record (``scripts/results.py``): a line per seed,
    titled by the algorithm, the env and the configuration."""
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    import results_summary

    runs = [(f"seed {entry['seed']}", [(float(x), float(y)) for x, y in entry["evaluations"] or []])
            for entry in record["figures"]["per_seed"]]  # fmt: skip
    unit = results_summary.budget(record).split(" ", 1)[1]
    write_svg(
        out, runs, f"{record['algorithm']} on {record['env']}",
        "environment steps" if unit == "env steps" else unit, record["metric"].split(" (")[0],
        subtitle=record["configuration"] or "",
    )  # fmt: skip


def write_svg(
    out: str, runs: Sequence[tuple[str, Series]], title: str, x_title: str, y_title: str,
    subtitle: str = "",
) -> None:  # fmt: skip
    """``render`` the runs into the SVG file ``out`` (its folder made where missing)."""
    if not runs or not all(points for _, points in runs):
        empty = [label for label, points in runs if not points]
        raise SystemExit(f"{out}: no points to draw for {empty or 'any run'}")
    svg = render(runs, title, x_title, y_title, subtitle)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(svg)
    print(f"wrote {out}: {', '.join(f'{label} ({len(p)} points)' for label, p in runs)}")


if __name__ == "__main__":
    main()
