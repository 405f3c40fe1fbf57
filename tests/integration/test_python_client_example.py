"""client/python/example.py runs against a live server and reports both results
as matching numpy, with the build's stubs and with stubs made by
client/python/generate_stubs.sh."""
import os
import subprocess
import sys
import tempfile
import unittest

from gemmserve_testing.base import GemmServeTestCase

CLIENT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client",
                          "python")
EXAMPLE = os.path.join(CLIENT_DIR, "example.py")


class PythonClientExampleTest(GemmServeTestCase):

    def run_example(self, *args, env=None):
        result = subprocess.run([sys.executable, EXAMPLE, "--url", self.server.address, *args],
                                capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(result.returncode, 0,
                         f"example failed:\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        self.assertIn("matmul FP32 [2, 3, 4] x [4, 5] -> [2, 3, 5]: OK", result.stdout)
        self.assertIn("grouped_matmul BF16", result.stdout)
        self.assertNotIn("MISMATCH", result.stdout)
        return result

    def stubs_on_pythonpath(self):
        """The folder holding grpc_service_pb2.py on this test's PYTHONPATH (the build's)."""
        import grpc_service_pb2
        return os.path.dirname(os.path.abspath(grpc_service_pb2.__file__))

    def test_example_succeeds_with_the_build_stubs_given_by_flag(self):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GEMMSERVE_STUBS")}
        self.run_example("--stubs", self.stubs_on_pythonpath(), env=env)

    def test_example_succeeds_with_the_build_stubs_on_pythonpath(self):
        env = {k: v for k, v in os.environ.items() if k != "GEMMSERVE_STUBS"}
        env["PYTHONPATH"] = self.stubs_on_pythonpath()
        self.run_example(env=env)

    def test_example_succeeds_with_stubs_from_generate_stubs_script(self):
        with tempfile.TemporaryDirectory() as out_dir:
            subprocess.run(["sh", os.path.join(CLIENT_DIR, "generate_stubs.sh"), out_dir],
                           check=True, capture_output=True, timeout=60)
            self.assertTrue(os.path.isfile(os.path.join(out_dir, "grpc_service_pb2_grpc.py")))
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "GEMMSERVE_STUBS")}
            self.run_example("--stubs", out_dir, env=env)

    def test_example_fails_when_the_server_is_unreachable(self):
        # Checks that the example's exit code means something: a closed port fails.
        env = {k: v for k, v in os.environ.items() if k != "GEMMSERVE_STUBS"}
        result = subprocess.run([sys.executable, EXAMPLE, "--url", "127.0.0.1:1",
                                 "--timeout", "2"], capture_output=True, text=True, timeout=60,
                                env=env)
        self.assertNotEqual(result.returncode, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
