"""The PNGs of a run's curves: `python -m benchmarks.results RUN.json --plots benchmarks/plots` draws each figure
that has `Curves` (throughput against partitions, latency percentiles) as `<figure>.png`, raybroker's line beside
its same-run baseline's, with the run's date and mode under the title so a plot is never read apart from its run.

matplotlib draws them with its Agg backend (no display); it is a `bench` extra, imported only here.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import Figure
from benchmarks.run_info import RunInfo

# Each side keeps its colour and marker on every plot.
STYLES = {"raybroker": ("tab:blue", "o"), "kafka": ("tab:orange", "s")}
OTHER_STYLE = ("tab:gray", "^")
DPI = 110


def write_plots(info: RunInfo, figures: list[Figure], folder: Path) -> list[Path]:
    """Draws every figure with curves into `folder` (created if missing); the files written, in figure order."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for figure in figures:
        curves = figure.curves
        if curves is None:
            continue
        canvas = pyplot.figure(figsize=(7, 4.5))
        axes = canvas.add_subplot()
        for side, points in curves.lines.items():
            colour, marker = STYLES.get(side, OTHER_STYLE)
            axes.plot([x for x, _ in points], [y for _, y in points], label=side, color=colour, marker=marker)
        if curves.log_x:
            axes.set_xscale("log")
        if curves.log_y:
            axes.set_yscale("log")
        axes.set_xlabel(curves.x_label)
        axes.set_ylabel(curves.y_label)
        axes.set_title(f"{figure.name}: {curves.title}\n{info.started_utc}, {info.mode} run", fontsize=10)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
        path = folder / f"{figure.name}.png"
        canvas.savefig(path, dpi=DPI, bbox_inches="tight")
        pyplot.close(canvas)
        written.append(path)
    return written
