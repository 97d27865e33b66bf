#!/usr/bin/env python3
"""Writes the benchmark figures article from several runs of `pcast-bench all` (make bench).

Each run is a folder of `<name>.md` sections, as `pcast-bench` writes them (the file's time says
when that run of the benchmark ended). For every benchmark, the runs' sections are laid side by side: where a line
reads the same in every run but for its numbers, each number that differs becomes the lowest–highest
of the runs (`12.1–14.3`); an equal number stays as it is. A line whose words differ between runs
(a different verdict, a missing figure) is shown once per run. So every figure in the article is
what a fresh run wrote, with its spread, and none is copied by hand.

    bench-article.py RUN_DIR [RUN_DIR ...] > Benchmarks-figures.md
"""
import datetime
import os
import re
import sys

# A number: 1,234.5 (thousands with commas and no space), 12, 0.10. Not the digits inside a word.
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\w])")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def template(line):
    """The line with its dates and numbers taken out, and those values in order."""
    line = DATE.sub("⟨date⟩", line)
    values = NUMBER.findall(line)
    return NUMBER.sub("⟨n⟩", line), values


def number(text):
    return float(text.replace(",", ""))


def decimals(text):
    return len(text.split(".")[1]) if "." in text else 0


def spread(values):
    """One figure from the runs: as it is when equal, else lowest–highest."""
    if len(set(values)) == 1:
        return values[0]
    low = min(values, key=number)
    high = max(values, key=number)
    places = max(decimals(v) for v in values)
    grouped = any("," in v for v in values)

    def show(v):
        value = number(v)
        return f"{value:,.{places}f}" if grouped else f"{value:.{places}f}"
    return f"{show(low)}–{show(high)}"


def merge_line(lines):
    """One line of the article from the same line of every run, or None when their words differ."""
    shapes = [template(line) for line in lines]
    if any(shape[0] != shapes[0][0] for shape in shapes):
        return None
    if len(lines) == 1:
        return lines[0]
    merged = iter([spread(list(column)) for column in zip(*(values for _, values in shapes))])
    return NUMBER.sub(lambda _: next(merged), DATE.sub("⟨date⟩", lines[0]))


def merge_row(rows):
    """A table row whose cells are merged one by one; cells whose words differ list each run's."""
    cells = [row.strip().strip("|").split("|") for row in rows]
    if any(len(c) != len(cells[0]) for c in cells):
        return None
    out = []
    for column in zip(*cells):
        column = [c.strip() for c in column]
        merged = merge_line(column)
        if merged is None:
            distinct = []
            for c in column:
                if c not in distinct:
                    distinct.append(c)
            merged = " / ".join(distinct)
        out.append(merged)
    return "| " + " | ".join(out) + " |"


def merge_section(sections):
    """The runs' sections of one benchmark as one."""
    runs = [s.rstrip("\n").split("\n") for s in sections]
    if any(len(r) != len(runs[0]) for r in runs):
        # Different shapes (a row more in one run): each run's section whole, numbered.
        out = []
        for index, lines in enumerate(runs, 1):
            body = [line for line in lines if not line.startswith("## ")]
            out.append(f"Run {index}:\n\n" + "\n".join(body))
        title = next((line for line in runs[0] if line.startswith("## ")), None)
        return "\n\n".join(([title] if title else []) + out)
    out = []
    for lines in zip(*runs):
        if DATE.search(lines[0]):
            # The run's stamp: the dates of all runs.
            dates = [DATE.search(line).group(0) for line in lines]
            out.append(DATE.sub(", ".join(dates), lines[0], count=1))
            continue
        merged = merge_row(lines) if lines[0].lstrip().startswith("|") else merge_line(lines)
        if merged is None:
            merged = "\n".join(f"(run {i}) {line}" for i, line in enumerate(lines, 1))
        out.append(merged)
    return "\n".join(out)


def machine():
    """This machine, as the figures need it said: cores and CPU model."""
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}"


def main(folders):
    if not folders:
        sys.exit("usage: bench-article.py RUN_DIR [RUN_DIR ...]")
    names = sorted({f[:-3] for folder in folders for f in os.listdir(folder)
                    if f.endswith(".md") and not f.startswith("micro-benchmarks")})
    stamps = [os.path.getmtime(os.path.join(folder, f)) for folder in folders
              for f in os.listdir(folder) if f.endswith(".md")]
    if not stamps:
        sys.exit("no <name>.md in " + ", ".join(folders))

    def utc(stamp):
        return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    print("# Benchmark figures\n")
    print("What `make bench` measured, written by `scripts/bench-article.py` from the runs' own "
          "output; do not edit it by hand. A figure that differed between runs is shown as the "
          "lowest–highest of them; a line that differed in its words is shown once per run "
          "(\"(run 2)\"). How each benchmark measures, and its goals, are in <doc:Benchmarks>.\n")
    print(f"{len(folders)} runs (`bench-results/run-N`) written between {utc(min(stamps))} and "
          f"{utc(max(stamps))} UTC, on {machine()}.\n")
    for name in names:
        sections = []
        missing = []
        written = []
        for index, folder in enumerate(folders, 1):
            path = os.path.join(folder, name + ".md")
            if os.path.exists(path):
                sections.append(open(path).read())
                stamp = datetime.datetime.fromtimestamp(os.path.getmtime(path), datetime.timezone.utc)
                written.append(stamp.strftime("%Y-%m-%d %H:%M"))
            else:
                missing.append(index)
        # The article's only top heading is its title: a section's own "# " becomes "## ".
        section = "\n".join("#" + line if line.startswith("# ") else line
                             for line in merge_section(sections).split("\n")).lstrip("\n")
        if not section.startswith("## "):
            section = f"## {name}\n\n" + section
        # When each run of it ended (its file's time), under its heading.
        heading, _, body = section.partition("\n")
        section = f"{heading}\n\n`pcast-bench {name}`, runs ended {', '.join(written)} UTC.\n{body}"
        if missing:
            section += f"\n\n`pcast-bench {name}` wrote nothing in run {', '.join(map(str, missing))} (it failed there)."
        if len(sections) < 3:
            section += f"\n\nFrom {len(sections)} run{'s' if len(sections) != 1 else ''} only: fewer than the three a spread needs."
        print(section.rstrip() + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
