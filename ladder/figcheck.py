"""Is a figure legible? `collisions(fig)` lists what a reader could not read: two pieces of text on top
of each other, text over a plotted point, a legend over data. tests/test_figures.py runs it on every
figure the lessons and the package draw."""
from __future__ import annotations

import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.legend import Legend
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.transforms import Bbox

SLACK = 1.0   # pixels two boxes may share (anti-aliased edges touching is not a collision)


def _shrunk(box: Bbox) -> Bbox:
    return Bbox([[box.x0 + SLACK, box.y0 + SLACK], [box.x1 - SLACK, box.y1 - SLACK]])


def _texts(fig, renderer) -> list[tuple[str, Bbox]]:
    """Every visible, non-empty text of the figure outside legends: labels, titles, annotations, ticks."""
    in_legends = {id(t) for lg in _legends(fig) for t in [*lg.get_texts(), lg.get_title()]}
    ticks = [(tick, axis) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for tick in axis.get_major_ticks() + axis.get_minor_ticks()]
    drawn_ticks = {id(label) for tick, axis in ticks if _in_view(tick.get_loc(), axis)
                   for label in (tick.label1, tick.label2)}
    all_ticks = {id(label) for tick, _ in ticks for label in (tick.label1, tick.label2)}
    found = []
    for artist in fig.findobj(Text):
        if not artist.get_visible() or not artist.get_text().strip() or id(artist) in in_legends \
                or (id(artist) in all_ticks and id(artist) not in drawn_ticks):  # a tick outside the view is not drawn
            continue
        box = artist.get_window_extent(renderer)
        if box.width > 0 and box.height > 0 and fig.bbox.overlaps(box):
            found.append((artist.get_text(), box))
    return found


def _in_view(location, axis) -> bool:
    low, high = sorted(axis.get_view_interval())
    return low - 1e-9 * abs(low) <= location <= high + 1e-9 * abs(high)


def _legends(fig) -> list[Legend]:
    return [lg for lg in fig.findobj(Legend) if lg.get_visible()]


def _points(ax) -> list[Bbox]:
    """Boxes of the plotted markers (scatter and line markers) of one Axes, in pixels."""
    boxes = []
    scale = ax.figure.dpi / 72
    for coll in ax.collections:
        if not isinstance(coll, PathCollection) or not coll.get_visible():
            continue
        sizes = coll.get_sizes()
        for i, (x, y) in enumerate(coll.get_offset_transform().transform(coll.get_offsets())):
            r = np.sqrt(sizes[i % len(sizes)] if len(sizes) else 36) / 2 * scale
            boxes.append(Bbox([[x - r, y - r], [x + r, y + r]]))
    for line in ax.get_lines():
        if line.get_visible() and line.get_marker() not in (None, "", "None", " "):
            r = line.get_markersize() / 2 * scale
            for x, y in line.get_transform().transform(np.column_stack(line.get_data())):
                boxes.append(Bbox([[x - r, y - r], [x + r, y + r]]))
    return [b for b in boxes if np.all(np.isfinite(b.get_points())) and ax.bbox.overlaps(b)]


def _data(ax) -> list[Bbox]:
    """Everything a legend must not cover: markers, bars, and the lines (sampled every few pixels)."""
    boxes = _points(ax)
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_width() and patch.get_height():
            boxes.append(patch.get_window_extent())
    for line in ax.get_lines():
        if not line.get_visible() or line.get_linestyle() in ("None", "", " "):
            continue
        pixels = line.get_transform().transform(np.column_stack(line.get_data()))
        pixels = pixels[np.all(np.isfinite(pixels), axis=1)]
        for (x0, y0), (x1, y1) in zip(pixels, pixels[1:]):
            steps = max(1, int(np.hypot(x1 - x0, y1 - y0) // 3))
            for t in np.linspace(0, 1, steps + 1):
                x, y = x0 + t * (x1 - x0), y0 + t * (y1 - y0)
                boxes.append(Bbox([[x - 0.5, y - 0.5], [x + 0.5, y + 0.5]]))
    return [b for b in boxes if ax.bbox.overlaps(b)]


def collisions(fig) -> list[str]:
    """What is unreadable in `fig`: overlapping texts, texts over markers, legends over data or text."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = _texts(fig, renderer)
    found = []
    for i, (a, box_a) in enumerate(texts):
        for b, box_b in texts[i + 1:]:
            if _shrunk(box_a).overlaps(_shrunk(box_b)):
                found.append(f"text {a!r} overlaps text {b!r}")
    for ax in fig.axes:
        for marker in _points(ax):
            for text, box in texts:
                if _shrunk(box).overlaps(_shrunk(marker)):
                    found.append(f"text {text!r} covers a plotted point")
    for legend in _legends(fig):
        box = _shrunk(legend.get_window_extent(renderer))
        if any(box.overlaps(b) for ax in fig.axes for b in _data(ax)):
            found.append(f"a legend covers data ({', '.join(t.get_text() for t in legend.get_texts()[:2])}, ...)")
        found += [f"a legend covers text {text!r}" for text, tbox in texts if box.overlaps(_shrunk(tbox))]
    return sorted(set(found))
