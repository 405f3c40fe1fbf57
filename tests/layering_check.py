"""The house plan of docs/architecture.md, checked on the tree (issue 52).

1. Includes: a library's sources (tests and test helpers aside) include the headers of the
   layers below it only, as LAYERS lists them; the composition root includes every layer.
2. Links: the layers below the gRPC front end link no gRPC. The link lines CMake wrote for the
   test binaries of core, repository, serving and the HTTP front end name no gRPC library, while
   the gRPC front end's does (so the check sees one where there is one). The protocol's messages
   are gemmserve_proto (protobuf only); the service stubs are gemmserve_proto_grpc."""
import argparse
import glob
import os
import re
import sys

# Each layer of server/ and what its sources may include besides their own, bottom up; kept as
# docs/architecture.md draws it.
LAYERS = {
    "common": set(),
    "tensor": {"common"},
    "ops": {"common", "tensor"},
    "process": {"common", "tensor", "ops"},
    "metrics": {"common", "tensor"},
    "core": {"common", "tensor", "metrics"},
    "models": {"common", "tensor", "metrics", "core", "ops"},
    "repository": {"common", "tensor", "metrics", "core", "ops", "models"},
    "shm": {"common"},
    "serving": {"common", "tensor", "metrics", "core", "shm", "repository"},
    "service": {"common", "tensor", "metrics", "core", "shm", "repository", "serving"},
    "http": {"common", "tensor", "metrics", "core", "shm", "repository", "serving"},
    # The router of a sharded layer: its shards over gRPC, behind models' RemoteExperts.
    "remote": {"common", "tensor", "metrics", "core", "models"},
    "root": {"common", "tensor", "ops", "process", "metrics", "core", "models", "repository",
             "shm", "serving", "service", "http", "remote"},
}
MAIN_MAY_INCLUDE = {"common", "process", "root"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"server/([a-z_]+)/', re.MULTILINE)
TEST_SOURCE = re.compile(r"(_test\.cc|_testing\.h|_test_main\.cc)$")

BELOW_GRPC = ("core_test", "repository_test", "serving_test", "http_test")
GRPC_FRONT_END = "service_test"
GRPC_LIBRARY = re.compile(r"lib(grpc|gpr)[^/\s]*\.(so|a)")


def include_failures(source_root):
    """Every include of a layer its includer may not use, as 'file: includes layer'."""
    server = os.path.join(source_root, "server")
    failures, checked = [], 0
    for directory, _, files in os.walk(server):
        relative = os.path.relpath(directory, server).split(os.sep)
        layer = relative[0] if relative[0] != "." else None
        for name in sorted(files):
            if not name.endswith((".h", ".cc", ".inc")) or TEST_SOURCE.search(name):
                continue
            if layer is None and name != "main.cc":
                continue
            allowed = MAIN_MAY_INCLUDE if layer is None else LAYERS.get(layer)
            path = os.path.join(directory, name)
            if allowed is None:
                failures.append(f"{os.path.relpath(path, source_root)}: server/{layer} is not a "
                                "layer of LAYERS (add it, and to docs/architecture.md)")
                continue
            with open(path, encoding="utf-8") as f:
                included = set(INCLUDE.findall(f.read())) - {layer}
            checked += 1
            failures += [f"{os.path.relpath(path, source_root)}: includes server/{other}, a layer "
                         f"{'above' if other in LAYERS else 'outside'} it"
                         for other in sorted(included - allowed)]
    return failures, checked


def link_line(build, target):
    """The link of the executable `target` as CMake wrote it: Make's link.txt, or Ninja's
    build statement for bin/TARGET with its variables (LINK_LIBRARIES)."""
    found = glob.glob(os.path.join(build, "**", f"{target}.dir", "link.txt"), recursive=True)
    ninja = os.path.join(build, "build.ninja")
    if not found and os.path.exists(ninja):
        with open(ninja) as f:
            found = re.findall(rf"^build bin/{re.escape(target)}: .*\n(?:  .*\n)*", f.read(),
                               re.MULTILINE)
        if len(found) == 1:
            return found[0]
    elif len(found) == 1:
        with open(found[0]) as f:
            return f.read()
    sys.exit(f"layering_check: {len(found)} link lines for {target} under {build}")


def link_failures(build):
    failures = []
    for target in BELOW_GRPC:
        libraries = sorted(set(m.group(0) for m in GRPC_LIBRARY.finditer(link_line(build, target))))
        if libraries:
            failures.append(f"{target} links {', '.join(libraries)}")
    if not GRPC_LIBRARY.search(link_line(build, GRPC_FRONT_END)):
        failures.append(f"{GRPC_FRONT_END} links no gRPC library: the check cannot see one")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("build", help="the CMake build directory")
    parser.add_argument("--source", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="the source tree (default: this file's)")
    args = parser.parse_args()
    failures, checked = include_failures(args.source)
    if checked < 100:
        failures.append(f"only {checked} sources under server/ were checked: is --source right?")
    failures += link_failures(args.build)
    for failure in failures:
        print(f"layering_check: {failure}", file=sys.stderr)
    if not failures:
        print(f"layering_check: {checked} sources include only the layers below them; "
              f"{', '.join(BELOW_GRPC)} link no gRPC; {GRPC_FRONT_END} does")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
