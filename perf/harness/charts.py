# SPDX-License-Identifier: GPL-2.0-or-later
"""PNG charts of a summary, drawn with gnuplot (pngcairo)."""

import math
import os
import shutil
import subprocess

from harness.matrix import DRIVERS, GUEST_SYSTEMS, VHOST_SYSTEMS


class ChartError(Exception):
    """gnuplot is missing or failed."""


def _gnuplot(script_path, script):
    with open(script_path, "w") as out:
        out.write(script)
    done = subprocess.run(["gnuplot", script_path], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ChartError(f"gnuplot failed on {script_path}: {done.stderr.strip()[-1000:]}")


def _kiops(summary, target_name, workload_name):
    value = summary.median(target_name, workload_name)
    return "-" if value is None else f"{value / 1000:.2f}"


def _has_data(summary, target):
    return any(summary.median(target.name, w.name) is not None for w in summary.workloads)


def iops_per_cell(summary, driver, out_dir):
    """Clustered bars: kIOPS per workload, one bar per system. Returns the PNG name or None."""
    targets = [t for t in summary.targets
               if t.driver == driver and t.system not in VHOST_SYSTEMS + GUEST_SYSTEMS and
               _has_data(summary, t)]
    if not targets:
        return None
    data = os.path.join(out_dir, f"iops-{driver}.dat")
    with open(data, "w") as out:
        out.write("workload " + " ".join(t.name for t in targets) + "\n")
        for workload in summary.workloads:
            out.write(workload.name + " " +
                      " ".join(_kiops(summary, t.name, workload.name) for t in targets) + "\n")
    png = f"iops-{driver}.png"
    width = max(900, 60 * len(summary.workloads) * max(1, len(targets)) // 3)
    _gnuplot(os.path.join(out_dir, f"iops-{driver}.gp"), f"""
set terminal pngcairo size {width},520 font ",10"
set output "{os.path.join(out_dir, png)}"
set title "{driver} driver: IOPS per cell (median)"
set ylabel "kIOPS"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set datafile missing "-"
set key outside right top
set xtics rotate by -35
set grid ytics
set yrange [0:*]
plot for [i=2:{len(targets) + 1}] "{data}" using i:xtic(1) title columnheader(i)
""")
    return png


def _by_queue_count(summary, out_dir, stem, workloads, queue_counts, series, labels):
    """A grid of panels, one per workload, each plotting `series` against the queue count.
    series: (column, title, gnuplot style, target name for a queue count or None); labels:
    (x label, y label, chart title). Returns the PNG name."""
    data = os.path.join(out_dir, f"{stem}.dat")
    with open(data, "w") as out:
        for workload in workloads:
            out.write(f"# {workload.name}\nqueues " + " ".join(s[0] for s in series) + "\n")
            for q in queue_counts:
                values = [_kiops(summary, name(q), workload.name) if name(q) else "-"
                          for _, _, _, name in series]
                out.write(f"{q} " + " ".join(values) + "\n")
            out.write("\n\n")
    columns = 4
    rows = math.ceil(len(workloads) / columns)
    png = f"{stem}.png"
    panels = []
    for index, workload in enumerate(workloads):
        plots = [f'"{data if i == 0 else ""}" index {index} using 1:{i + 2} with {style} '
                 f'title "{title}"' for i, (_, title, style, _) in enumerate(series)]
        panels.append(f'set title "{workload.name}"\nplot ' + ", \\\n     ".join(plots) + "\n")
    xlabel, ylabel, title = labels
    _gnuplot(os.path.join(out_dir, f"{stem}.gp"), f"""
set terminal pngcairo size {320 * columns},{260 * rows} font ",9"
set output "{os.path.join(out_dir, png)}"
set datafile missing "-"
set key bottom right font ",7"
set xlabel "{xlabel}"
set ylabel "{ylabel}"
set xtics ({", ".join(str(q) for q in queue_counts)})
set offsets 0.2, 0.2, 0, 0
set yrange [0:*]
set grid
set multiplot layout {rows},{columns} title "{title}"
{"".join(panels)}
unset multiplot
""")
    return png


def iops_by_queues(summary, driver, out_dir):
    """One panel per workload: bexd (and the limit responder) against the queue count, QSD as a
    flat line. Returns the PNG name, or None when fewer than two queue counts were measured."""
    queue_counts = sorted({t.queues for t in summary.targets if t.driver == driver and
                           t.system in ("bexd", "limit") and _has_data(summary, t)})
    if len(queue_counts) < 2:
        return None
    series = [
        ("bexd", "bexd", "linespoints lw 2", lambda q: f"bexd-{driver}-q{q}"),
        ("limit", "limit", "linespoints lw 2 dt 2",
         lambda q: f"limit-q{q}" if driver == "null" else None),
        ("qsd", "QSD (1 queue)", "lines lw 2 dt 3", lambda q: f"qsd-{driver}"),
    ]
    if any(t.baseline and t.driver == driver and _has_data(summary, t) for t in summary.targets):
        series.append(("base", "bexd baseline", "linespoints lw 1 dt 4",
                       lambda q: f"base-bexd-{driver}-q{q}"))
    return _by_queue_count(summary, out_dir, f"queues-{driver}", summary.workloads, queue_counts, series,
                           ("queues", "kIOPS", f"{driver} driver: IOPS by queue count (median)"))


def vhost_by_queues(summary, out_dir):
    """One panel per workload: the vhost-user-fs export's requests/s against the ring count, one
    line per driver. Returns the PNG name, or None when fewer than two ring counts were measured."""
    targets = [t for t in summary.targets if t.system == "vhost" and _has_data(summary, t)]
    queue_counts = sorted({t.queues for t in targets})
    if len(queue_counts) < 2:
        return None
    workloads = [w for w in summary.workloads if targets[0].runs(w)]
    series = [(driver, driver, style, lambda q, d=driver: f"vhost-{d}-q{q}")
              for driver, style in (("null", "linespoints lw 2"), ("file", "linespoints lw 2 dt 2"),
                                    ("pagecache", "linespoints lw 2 dt 3"))]
    return _by_queue_count(summary, out_dir, "vhost-queues", workloads, queue_counts, series,
                           ("request rings", "k requests/s",
                            "vhost-user-fs export: requests/s by ring count (median)"))


def draw_all(summary, out_dir):
    """Draws every chart that has data; returns the PNG names (relative to out_dir)."""
    if shutil.which("gnuplot") is None:
        raise ChartError("gnuplot is not installed (apt-get install gnuplot-nox)")
    charts = []
    for driver in DRIVERS:
        for draw in (iops_per_cell, iops_by_queues):
            png = draw(summary, driver, out_dir)
            if png:
                charts.append(png)
    png = vhost_by_queues(summary, out_dir)
    if png:
        charts.append(png)
    return charts
