"""Shared helpers of gemmserve's Python integration tests (tests/integration/)."""
import os


def shared_dir():
    """The project's shared/ folder (specs, conformance data), beside the repository."""
    path = os.environ.get("GEMMSERVE_SHARED")
    if not path:
        raise RuntimeError("GEMMSERVE_SHARED is not set: run through ctest, or set it to "
                           "<repository>/../shared")
    if not os.path.isdir(path):
        raise RuntimeError(f"GEMMSERVE_SHARED={path} does not exist: the conformance data "
                           f"must be checked out beside the repository as ../shared")
    return path
