"""Is a figure legible? `collisions(fig)` lists what a reader could not read: two pieces of text on top
of each other (roof labels included), text over a plotted point, a marker hiding another marker or a small mark
at a true place, a legend over data. tests/test_figures.py runs it on every figure the lessons and the package draw.

A mark drawn in layers (a shape and the rung's number on it) is one mark: its layers share a gid, which also
names it in what `collisions` reports."""
from __future__ import annotations

import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.legend import Legend
from matplotlib.markers import MarkerStyle
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from matplotlib.transforms import Affine2D, Bbox

SLACK = 1.0   # pixels two boxes may share (anti-aliased edges touching is not a collision)
MARKER_OVERLAP = 0.3   # share of the smaller marker another may cover before a reader loses it


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


def markers(ax) -> list[tuple[str | None, str, Bbox]]:
    """(gid, name, box in pixels) of every plotted marker of one Axes, scatter and line markers, boxed by the
    marker's own outline. The name is the gid, else the artist's label, else where the marker sits."""
    found = []
    to_pixels = ax.figure.dpi / 72
    for coll in ax.collections:
        if not isinstance(coll, PathCollection) or not coll.get_visible() or not len(coll.get_transforms()):
            continue
        paths, scales = coll.get_paths(), coll.get_transforms()   # scales: each marker's size, set by the draw
        pixels = coll.get_offset_transform().transform(coll.get_offsets())
        for i, (where, (x, y)) in enumerate(zip(coll.get_offsets(), pixels)):
            box = paths[i % len(paths)].get_extents(Affine2D(scales[i % len(scales)])).translated(x, y)
            found.append((coll.get_gid(), _name(coll, where), box))
    for line in ax.get_lines():
        if line.get_visible() and line.get_marker() not in (None, "", "None", " "):
            style = MarkerStyle(line.get_marker())
            outline = style.get_path().get_extents(style.get_transform().scale(line.get_markersize() * to_pixels))
            data = np.column_stack(line.get_data())
            for where, (x, y) in zip(data, line.get_transform().transform(data)):
                found.append((line.get_gid(), _name(line, where), outline.translated(x, y)))
    return [(gid, name, box) for gid, name, box in found
            if np.all(np.isfinite(box.get_points())) and ax.bbox.overlaps(box)]


def _name(artist, where) -> str:
    label = artist.get_label()
    return artist.get_gid() or (label if label and not label.startswith("_") else
                                f"at ({where[0]:.3g}, {where[1]:.3g})")


def _covered(a: Bbox, b: Bbox) -> float:
    """The share of the smaller of two boxes that the other covers."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    smaller = min(a.width * a.height, b.width * b.height)
    return max(width, 0) * max(height, 0) / smaller if smaller > 0 else 0.0


# The gid of a small mark at a point's true place (a zoom's overview dots, a set-aside mark's true place,
# ladder.roofline): such marks may sit on one another, but no other marker may hide one.
PLACE = "place of "


def _markers_on_markers(ax) -> list[str]:
    """Two markers of different marks where one covers much of the other: a reader cannot see both."""
    marks = [(gid, name, box) for gid, name, box in markers(ax) if not (gid or "").startswith(PLACE)]
    where = f" in {ax.get_title().splitlines()[0]!r}" if ax.get_title() else ""
    return [f"marker {a!r} sits on marker {b!r}{where}"
            for i, (gid_a, a, box_a) in enumerate(marks) for gid_b, b, box_b in marks[i + 1:]
            if (gid_a is None or gid_a != gid_b) and _covered(box_a, box_b) > MARKER_OVERLAP]


def _hidden_places(ax) -> list[str]:
    """A small mark at a true place that another mark's marker covers: the reader is promised it shows."""
    found = markers(ax)
    where = f" in {ax.get_title().splitlines()[0]!r}" if ax.get_title() else ""
    return [f"marker {name!r} hides the {place}{where}"
            for gid, place, dot in found if (gid or "").startswith(PLACE)
            for other, name, box in found if not (other or "").startswith(PLACE)
            and other != gid.removeprefix(PLACE) and _covered(dot, box) > 0.5]


def _data(ax) -> list[Bbox]:
    """Everything a legend must not cover: markers, bars, and the lines (sampled every few pixels)."""
    boxes = [box for _, _, box in markers(ax)]
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
    """What is unreadable in `fig`: overlapping texts, texts over markers, markers on markers, legends over data
    or text."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = _texts(fig, renderer)
    found = []
    for i, (a, box_a) in enumerate(texts):
        for b, box_b in texts[i + 1:]:
            if _shrunk(box_a).overlaps(_shrunk(box_b)):
                found.append(f"text {a!r} overlaps text {b!r}")
    for ax in fig.axes:
        for _, name, marker in markers(ax):
            for text, box in texts:
                if _shrunk(box).overlaps(_shrunk(marker)):
                    found.append(f"text {text!r} covers a plotted point ({name})")
        found += _markers_on_markers(ax) + _hidden_places(ax)
    for legend in _legends(fig):
        box = _shrunk(legend.get_window_extent(renderer))
        if any(box.overlaps(b) for ax in fig.axes for b in _data(ax)):
            found.append(f"a legend covers data ({', '.join(t.get_text() for t in legend.get_texts()[:2])}, ...)")
        found += [f"a legend covers text {text!r}" for text, tbox in texts if box.overlaps(_shrunk(tbox))]
    return sorted(set(found))
