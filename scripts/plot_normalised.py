"""Normalised scores as an SVG bar chart: ``(ours - random) / (reference - random)`` for each
record with a published reference and a random-policy figure (0 is a random policy, 1 the
reference), drawn without a plotting library.

    python scripts/plot_normalised.py            # write docs/curves/normalised_scores.svg
    python scripts/plot_normalised.py --check    # exit 1 when the picture is stale

The scores come from ``scripts/results_summary.py`` (records of ``docs/results/``, random
baselines of ``docs/results/random/``); ``scripts/render_results.py`` puts the same scores in a
table beside the picture.
"""

from __future__ import annotations

import argparse
import sys
from html import escape
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_summary as summary
from plot_curves import nice_ticks
from render_results import NORMALISED_SVG, ordered_records
from results import ROOT

WIDTH, ROW, LEFT, RIGHT, TOP, BOTTOM = 640, 26, 250, 30, 40, 44


def render(bars: list[tuple[str, float]]) -> str:
    """The SVG text: a horizontal bar per ``(label, score)``, lines at 0 and 1."""
    if not bars:
        raise SystemExit("no record has both a published reference and a random-policy figure")
    height = TOP + ROW * len(bars) + BOTTOM
    ticks = nice_ticks(min(0.0, *(s for _, s in bars)), max(1.0, *(s for _, s in bars)), 6)
    low, high = ticks[0], ticks[-1]
    plot_w = WIDTH - LEFT - RIGHT

    def px(value: float) -> float:
        return LEFT + (value - low) / (high - low) * plot_w

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">'
        "Normalised score: 0 is a random policy, 1 the published reference</text>",
    ]
    bottom = TOP + ROW * len(bars)
    for tick in ticks:
        colour = "#444" if tick in (0, 1) else "#ddd"
        parts.append(f'<line x1="{px(tick):.1f}" y1="{TOP}" x2="{px(tick):.1f}" y2="{bottom}" '
                     f'stroke="{colour}"/>')  # fmt: skip
        parts.append(f'<text x="{px(tick):.1f}" y="{bottom + 16}" text-anchor="middle">'
                     f"{tick:g}</text>")  # fmt: skip
    for i, (label, score) in enumerate(bars):
        y = TOP + ROW * i
        start, end = sorted((px(0.0), px(score)))
        parts.append(f'<rect x="{start:.1f}" y="{y + 5}" width="{end - start:.1f}" '
                     f'height="{ROW - 10}" fill="#1f77b4"/>')  # fmt: skip
        parts.append(f'<text x="{LEFT - 8}" y="{y + ROW / 2 + 4}" text-anchor="end">'
                     f"{escape(label)}</text>")  # fmt: skip
        parts.append(f'<text x="{end + 4:.1f}" y="{y + ROW / 2 + 4}">{score:.2f}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{height - 10}" text-anchor="middle">'
                 "(ours - random) / (reference - random)</text>")  # fmt: skip
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def bars() -> list[tuple[str, float]]:
    """``("SAC, HalfCheetah-v5 (1)", 1.2)``: the label numbers the variant as the table does."""
    scored = summary.normalised_rows(ordered_records(), summary.load_random_baselines())
    return [(f"{r['algorithm']}, {r['env']} ({i})", score)
            for i, (_, r, score) in enumerate(scored, 1)]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report a stale picture, write none")
    args = parser.parse_args(argv)
    svg = render(bars())
    current = NORMALISED_SVG.read_text(encoding="utf-8") if NORMALISED_SVG.exists() else None
    if args.check:
        if svg != current:
            print(f"stale {NORMALISED_SVG.relative_to(ROOT)} (run python scripts/plot_normalised.py)",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    NORMALISED_SVG.write_text(svg, encoding="utf-8")
    print(f"wrote {NORMALISED_SVG.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
