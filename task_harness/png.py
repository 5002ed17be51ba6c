"""A horizontal bar chart written as a PNG with zlib and struct only (no plotting library here).

Text uses a 3x5 pixel font, drawn at scale 2, enough for task ids and percentages.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

# 3 columns x 5 rows per glyph, row-major, "#" = ink.
FONT = {
    "a": ".#.#.#####.##.#",
    "b": "##.#.###.#.###.",
    "c": ".###..#..#...##",
    "d": "##.#.##.##.###.",
    "e": "####..####..###",
    "f": "####..####..#..",
    "g": ".###..#.##.#.##",
    "h": "#.##.####.##.##",
    "i": "###.#..#..#.###",
    "j": "..#..#..##.#.#.",
    "k": "#.##.###.#.##.#",
    "l": "#..#..#..#..###",
    "m": "#.#####.##.##.#",
    "n": "##.#.##.##.##.#",
    "o": ".#.#.##.##.#.#.",
    "p": "##.#.###.#..#..",
    "q": ".#.#.##.##.#.##",
    "r": "##.#.###.#.##.#",
    "s": ".###...#...###.",
    "t": "###.#..#..#..#.",
    "u": "#.##.##.##.#.##",
    "v": "#.##.##.##.#.#.",
    "w": "#.##.##.#####.#",
    "x": "#.##.#.#.#.##.#",
    "y": "#.##.#.#..#..#.",
    "z": "###..#.#.#..###",
    "0": "####.##.##.####",
    "1": ".#.##..#..#.###",
    "2": "##...#.#.#..###",
    "3": "###..#.##..####",
    "4": "#.##.####..#..#",
    "5": "####..##...###.",
    "6": ".#.#..##.#.#.#.",
    "7": "###..#..#.#..#.",
    "8": "####.#####.####",
    "9": "####.####..#..#",
    "-": "......###......",
    ".": "............#..",
    "%": "#.#..#.#.#..#.#",
    " ": "." * 15,
    "_": "............###",
    "/": "..#..#.#.#..#..",
}
WHITE, BLACK, GREY = (255, 255, 255), (40, 40, 40), (200, 200, 200)
PALETTE = [(120, 120, 120), (31, 119, 180), (255, 127, 14), (44, 160, 44)]


class Canvas:
    def __init__(self, width: int, height: int):
        self.width, self.height = width, height
        self.pixels = bytearray(WHITE * (width * height))

    def rect(self, x: int, y: int, w: int, h: int, color: tuple[int, int, int]) -> None:
        for row in range(max(y, 0), min(y + h, self.height)):
            start = (row * self.width + max(x, 0)) * 3
            end = (row * self.width + min(x + w, self.width)) * 3
            self.pixels[start:end] = bytes(color) * ((end - start) // 3)

    def text(self, x: int, y: int, text: str, color=BLACK, scale: int = 2) -> None:
        for char in text.lower():
            glyph = FONT.get(char, FONT[" "]).ljust(15, ".")
            for index, ink in enumerate(glyph):
                if ink == "#":
                    self.rect(
                        x + (index % 3) * scale, y + (index // 3) * scale, scale, scale, color
                    )
            x += 4 * scale

    def save(self, path: Path) -> None:
        rows = b"".join(
            b"\x00" + bytes(self.pixels[r * self.width * 3 : (r + 1) * self.width * 3])
            for r in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
        png += chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
        path.write_bytes(png)


def bar_chart(groups: dict[str, dict[str, float]], title: str, path: Path) -> Path:
    """One row per group (task), one bar per series (condition), values in [0, 1]."""
    series = sorted({name for values in groups.values() for name in values})
    label_width, bar_width, bar_height = 300, 420, 10
    row_height = bar_height * len(series) + 10
    height = 50 + row_height * len(groups) + 20 * len(series) + 10
    canvas = Canvas(label_width + bar_width + 80, height)
    canvas.text(10, 10, title)
    top = 40
    for tick in range(0, 101, 25):
        x = label_width + bar_width * tick // 100
        canvas.rect(x, top, 1, row_height * len(groups), GREY)
        canvas.text(x - 8, top + row_height * len(groups) + 4, f"{tick}%", scale=1)
    for row, (group, values) in enumerate(groups.items()):
        y = top + row * row_height + 5
        canvas.text(10, y + 2, group[:36])
        for index, name in enumerate(series):
            value = values.get(name)
            if value is None:
                continue
            color = PALETTE[index % len(PALETTE)]
            canvas.rect(
                label_width,
                y + index * bar_height,
                max(1, int(bar_width * value)),
                bar_height - 2,
                color,
            )
            canvas.text(
                label_width + int(bar_width * value) + 4,
                y + index * bar_height,
                f"{value:.0%}",
                scale=1,
            )
    legend = top + row_height * len(groups) + 20
    for index, name in enumerate(series):
        canvas.rect(label_width, legend + index * 20, 14, 14, PALETTE[index % len(PALETTE)])
        canvas.text(label_width + 20, legend + index * 20 + 2, name)
    canvas.save(path)
    return path
