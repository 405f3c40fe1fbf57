"""The layers below the gRPC front end link no gRPC (issue 52): the link lines CMake wrote for
the test binaries of core, repository, serving and the HTTP front end name no gRPC library, while
the gRPC front end's does (so the check sees one where there is one). The protocol's messages are
gemmserve_proto (protobuf only); the service stubs are gemmserve_proto_grpc."""
import argparse
import glob
import os
import re
import sys

BELOW_GRPC = ("core_test", "repository_test", "serving_test", "http_test")
GRPC_FRONT_END = "service_test"
GRPC_LIBRARY = re.compile(r"lib(grpc|gpr)[^/\s]*\.(so|a)")


def link_line(build, target):
    found = glob.glob(os.path.join(build, "**", f"{target}.dir", "link.txt"), recursive=True)
    if len(found) != 1:
        sys.exit(f"layering_check: {len(found)} link lines for {target} under {build}")
    with open(found[0]) as f:
        return f.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("build", help="the CMake build directory")
    build = parser.parse_args().build
    failures = []
    for target in BELOW_GRPC:
        libraries = sorted(set(m.group(0) for m in GRPC_LIBRARY.finditer(link_line(build, target))))
        if libraries:
            failures.append(f"{target} links {', '.join(libraries)}")
    if not GRPC_LIBRARY.search(link_line(build, GRPC_FRONT_END)):
        failures.append(f"{GRPC_FRONT_END} links no gRPC library: the check cannot see one")
    for failure in failures:
        print(f"layering_check: {failure}", file=sys.stderr)
    if not failures:
        print(f"layering_check: {', '.join(BELOW_GRPC)} link no gRPC; {GRPC_FRONT_END} does")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
