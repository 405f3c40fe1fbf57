"""The sections of docs/performance.md that a benchmark script other than
performance_report.py keeps, between its own markers."""
import json
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


def add_arguments(parser, root):
    """--json, --doc, --note and --from_json, as every such script takes them."""
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--doc", default=os.path.join(root, "docs", "performance.md"))
    parser.add_argument("--note", default="", help="a paragraph to put under the tables")
    parser.add_argument("--from_json", help="re-render a previous run's --json instead of running")


def rerender(args, name, render):
    """With --from_json: writes section `name` from that run with this --note
    and returns True; otherwise False."""
    if not args.from_json:
        return False
    with open(args.from_json) as f:
        results = json.load(f)
    results["note"] = args.note
    write_section(args.doc, name, render(results))
    return True


def cpu_model():
    """The machine's CPU, as /proc/cpuinfo names it, for a section's header."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def run_gemmserve_bench(build, threads, repetitions, case_filter, out):
    """gemmserve-bench's cases matching `case_filter`, run into `out` (JSON); returns the run."""
    import subprocess
    subprocess.run([os.path.join(build, "bin", "gemmserve-bench"), f"--threads={threads}",
                    f"--benchmark_repetitions={repetitions}",
                    f"--benchmark_filter={case_filter}", f"--benchmark_out={out}",
                    "--benchmark_out_format=json"], check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def bench_report_main(description, section, case_filter, module, plot_name, repetitions, root,
                      prepare=None):
    """The command line of a report over gemmserve-bench cases (quantized_benchmark.py,
    moe_layer_benchmark.py): runs the cases matching `case_filter` (or re-renders --from_json),
    turns the run into results with module.results_from_run, writes `section` with
    module.render and the plot with module.plot, and prints module.targets. `prepare(args)`,
    if given, runs before gemmserve-bench does (not for --from_json)."""
    import argparse
    import time
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(root, "build"))
    parser.add_argument("--repetitions", type=int, default=repetitions)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--plot", default=os.path.join(root, "docs", plot_name))
    add_arguments(parser, root)
    args = parser.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            results = json.load(f)
        results["note"] = args.note
    else:
        out = args.json or f"/tmp/gemmserve-{section}.json"
        if prepare is not None:
            prepare(args)
        run = run_gemmserve_bench(args.build, args.threads, args.repetitions, case_filter,
                                  out + ".bench")
        results = module.results_from_run(
            run, {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu_model(),
                  "threads": args.threads, "repetitions": args.repetitions, "note": args.note})
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
    write_section(args.doc, section, module.render(results))
    module.plot(results, args.plot)
    for what, got, want, met in module.targets(results):
        print(f"{what}: {got:.2f} (wanted {want}){'' if met else '  NOT MET'}")
    return 0
