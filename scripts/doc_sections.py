"""The sections of docs/performance.md that a benchmark script other than
performance_report.py keeps, between its own markers."""
import os


def markers(name):
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def write_section(path, name, section):
    """Replaces section `name` of the file at `path` with `section` (which
    carries its own markers), or appends it where the file has none."""
    begin, end = markers(name)
    doc = open(path).read() if os.path.exists(path) else ""
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + section + doc[doc.index(end) + len(end) + 1:]
    else:
        doc = doc.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(doc)


def finish(lines, name, note):
    """A section's text: its lines, the run's note if any, its end marker."""
    if note:
        lines = lines + [f"> **Note.** {note}", ""]
    return "\n".join(lines + [markers(name)[1]]) + "\n"
