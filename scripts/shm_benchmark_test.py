#!/usr/bin/python3
"""scripts/shm_benchmark.py end to end, small: 1 MiB, two short repetitions,
into a scratch document. The run must finish with every call answered, and
the section and JSON must carry the medians and the ratios computed from
them (the figures themselves are the machine's)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = None


class ShmBenchmarkTest(unittest.TestCase):
    def test_small_run_writes_its_section(self):
        with tempfile.TemporaryDirectory() as tmp:
            doc, out, png = (os.path.join(tmp, n) for n in ("doc.md", "r.json", "p.png"))
            with open(doc, "w") as f:
                f.write("# doc\n\nkept\n")
            subprocess.run([sys.executable, os.path.join(HERE, "shm_benchmark.py"),
                            f"--build={BUILD}", "--megabytes=1", "--duration=0.3",
                            "--warmup=0.1", "--repetitions=2", f"--doc={doc}", f"--json={out}",
                            f"--plot={png}"], check=True, timeout=100)
            with open(out) as f:
                results = json.load(f)
            with open(doc) as f:
                text = f.read()
        self.assertEqual(results["shape"], [4096, 64])
        self.assertEqual(len(results["repetitions"]), 2)
        for rep in results["repetitions"]:
            for way in ("socket", "shm"):
                r = rep[way]
                self.assertGreater(r["requests"], 0)
                self.assertAlmostEqual(r["transfer_us"], r["mean_us"] - r["server_us"])
        ratios = sorted(r["socket"]["transfer_us"] / r["shm"]["transfer_us"]
                        for r in results["repetitions"])
        self.assertAlmostEqual(results["transfer_ratio"], sum(ratios) / 2)
        self.assertTrue(text.startswith("# doc\n\nkept\n"))
        self.assertIn("<!-- shm-benchmark:begin -->", text)
        self.assertIn(f"Transfer part, socket / shared memory: {results['transfer_ratio']:.1f}x",
                      text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    args, rest = parser.parse_known_args()
    BUILD = args.build
    unittest.main(argv=[sys.argv[0]] + rest)
