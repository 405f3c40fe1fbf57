#!/usr/bin/env python3
"""The installed C++ client works from an outside project: `cmake --install`s
gemmserve's build into a temporary prefix, configures and builds
client/cpp/example/ against it with CMAKE_PREFIX_PATH (find_package(gemmserve)
and gemmserve::client only), and runs its examples against a live gemmserve:
matmul_example, and moe_layer_example on small mixture-of-experts layer
models (LAYERS, written by scripts/make_moe_layer.py into the server's model
repository).

Run by ctest as `client_cpp_install` (tests/CMakeLists.txt passes the build
directory, cmake and the generator, and sets PYTHONPATH and GEMMSERVE_BIN):

    PYTHONPATH=tests/python_lib GEMMSERVE_BIN=build/bin/gemmserve \\
      python3 client/cpp/install_test.py --build-dir build
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

from gemmserve_testing.server import ServerProcess

EXAMPLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example")
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(EXAMPLE_DIR)))
MAKE_MOE_LAYER = os.path.join(SOURCE_DIR, "scripts", "make_moe_layer.py")
# Small layers (K 64, I 32, 8 experts, 2 per token): `moe_layer` routed in the graph,
# `moe_layer_given` routed by the caller, in BF16.
LAYERS = {"moe_layer": ["--routing", "softmax_topk"],
          "moe_layer_given": ["--routing", "given", "--dtype", "bf16"]}
ARGS = None


def run(argv, timeout=120):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited with {result.returncode}:\n"
                             f"stdout:\n{result.stdout[-6000:]}\nstderr:\n{result.stderr[-6000:]}")
    return result


def write_layer_repository(repository):
    """LAYERS in `repository`."""
    for name, flags in LAYERS.items():
        run([sys.executable, "-B", MAKE_MOE_LAYER,
             "--out", os.path.join(repository, name, "1", "model.onnx"),
             "--k", "64", "--i", "32", "--g", "8", "--s", "2", *flags])


class InstalledClientTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        work = tempfile.TemporaryDirectory(prefix="gemmserve-install-test-")
        cls.addClassCleanup(work.cleanup)
        cls.prefix = os.path.join(work.name, "prefix")
        example_build = os.path.join(work.name, "example-build")
        run([ARGS.cmake, "--install", ARGS.build_dir, "--prefix", cls.prefix])
        configure = [ARGS.cmake, "-S", EXAMPLE_DIR, "-B", example_build,
                     f"-DCMAKE_PREFIX_PATH={cls.prefix}", "-DCMAKE_BUILD_TYPE=Release",
                     # Only the prefix may provide gemmserve, never a user's package registry.
                     "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"]
        if ARGS.generator:
            configure += ["-G", ARGS.generator]
        if ARGS.cxx_compiler:
            # The compiler that built the libraries: a clang sanitizer build's
            # objects need clang's sanitizer runtime, not gcc's.
            configure += [f"-DCMAKE_CXX_COMPILER={ARGS.cxx_compiler}"]
        if ARGS.link_flags:
            # A sanitizer build's static libraries need the sanitizer runtime at link time.
            configure += [f"-DCMAKE_EXE_LINKER_FLAGS={ARGS.link_flags}"]
        run(configure)
        run([ARGS.cmake, "--build", example_build, "-j2"], timeout=300)
        cls.example = os.path.join(example_build, "matmul_example")
        cls.moe_example = os.path.join(example_build, "moe_layer_example")

        repository = os.path.join(work.name, "repository")
        write_layer_repository(repository)
        cls.server = ServerProcess("--allow_client_shm", f"--model_repository={repository}")
        cls.server.start()
        cls.addClassCleanup(cls.server.stop)

    def test_install_holds_the_package_and_headers(self):
        for path in ("lib/cmake/gemmserve/gemmserveConfig.cmake",
                     "lib/cmake/gemmserve/gemmserveConfigVersion.cmake",
                     "lib/cmake/gemmserve/gemmserveTargets.cmake",
                     "include/gemmserve/client/cpp/client.h",
                     "include/gemmserve/client/cpp/shared_memory.h",
                     "include/gemmserve/grpc_service.grpc.pb.h",
                     "include/gemmserve/server/common/status_macros.h",
                     "lib/libgemmserve_client.a"):
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, path)), path)
        # The package names only its own prefix, never this build or source tree.
        with open(os.path.join(self.prefix, "lib/cmake/gemmserve/gemmserveTargets.cmake")) as f:
            targets = f.read()
        self.assertNotIn(os.path.abspath(ARGS.build_dir), targets)
        self.assertNotIn(SOURCE_DIR, targets)

    def test_example_built_against_the_install_matches_its_reference(self):
        result = subprocess.run([self.example, self.server.address], capture_output=True,
                                text=True, timeout=60)
        self.assertEqual(result.returncode, 0,
                         f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        self.assertIn("matmul FP32 [3, 4] x [4, 5] -> FP32 [3, 5]: OK", result.stdout)
        self.assertNotIn("via shared memory", result.stdout)

    def test_example_through_shared_memory_matches_its_reference(self):
        """The C++ shared-memory helper: A from a region, Y written to it by the server."""
        result = subprocess.run([self.example, self.server.address, "--shared_memory"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0,
                         f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        self.assertIn("matmul FP32 [3, 4] x [4, 5] -> FP32 [3, 5]: OK", result.stdout)
        self.assertIn("matmul via shared memory FP32 [3, 4] x [4, 5] -> FP32 [3, 5]: OK",
                      result.stdout)
        # The region was unregistered and unlinked.
        self.assertEqual([f for f in os.listdir("/dev/shm") if f.startswith("gemmserve_example_")],
                         [])

    def moe_layer_example_lines(self, *args):
        """The example's lines, without the numbers in parentheses; it must exit 0."""
        result = subprocess.run([self.moe_example, self.server.address, *args],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0,
                         f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return [re.sub(r" \(.*\)", "", line) for line in result.stdout.splitlines()]

    def test_moe_layer_example_checks_layer_models(self):
        """Metadata and config read, 4 tokens answered finite, 2 alone the same rows."""
        self.assertEqual(self.moe_layer_example_lines(), [  # the default model: moe_layer
            "moe_layer: layer moe_ffn, routing softmax_topk, activation silu, groups 8, "
            "x FP32 [-1, 64]: OK",
            "moe_layer x [4, 64] -> out FP32 [4, 64], finite: OK",
            "moe_layer tokens 0-1 alone = rows 0-1 of the 4-token answer: OK"])
        # ids and w sent too, values as BF16 bit patterns.
        self.assertEqual(self.moe_layer_example_lines("moe_layer_given"), [
            "moe_layer_given: layer moe_ffn, routing given, activation silu, groups 8, "
            "x BF16 [-1, 64]: OK",
            "moe_layer_given x [4, 64] -> out BF16 [4, 64], finite: OK",
            "moe_layer_given tokens 0-1 alone = rows 0-1 of the 4-token answer: OK"])

    def test_moe_layer_example_fails_on_a_model_that_is_not_a_layer(self):
        result = subprocess.run([self.moe_example, self.server.address, "matmul"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("matmul: layer (none), routing (none)", result.stdout)
        self.assertTrue(result.stdout.endswith(": MISMATCH\n"), result.stdout)

    def test_example_fails_when_the_server_is_unreachable(self):
        # The exit code means something: a closed port is a failure.
        result = subprocess.run([self.example, "127.0.0.1:1"], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("UNAVAILABLE", result.stderr)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", required=True, help="gemmserve's CMake build directory")
    parser.add_argument("--cmake", default="cmake", help="the cmake executable")
    parser.add_argument("--generator", help="CMake generator for the example's build")
    parser.add_argument("--cxx-compiler", help="C++ compiler for the example's build")
    parser.add_argument("--link-flags", default="", help="extra linker flags for the example")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
