#!/usr/bin/python3
"""The documentation against the tree: every relative link (and its #anchor)
resolves, every flag of `gemmserve` the docs name is one `gemmserve --help`
lists (and every flag it lists is in docs/flags.md), and every `gemmserve-cli`
command the docs name is one `gemmserve-cli --help` lists.

  /usr/bin/python3 tests/docs_check.py --gemmserve build/bin/gemmserve \
      --cli build/bin/gemmserve-cli
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*)$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
ARGS = None


def documents():
    paths = ["README.md", "SECURITY.md", "fuzz/README.md", "client/python/README.md",
             "client/node/README.md", "client/cpp/README.md", "tests/integration/README.md"]
    paths += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return [p for p in paths if os.path.exists(os.path.join(ROOT, p))]


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    return {slug(h) for h in HEADING.findall(FENCE.sub("", read(path)))}


def help_text(binary):
    run = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return run.stdout + run.stderr


class DocsTest(unittest.TestCase):
    def test_every_relative_link_resolves(self):
        broken = []
        for doc in documents():
            for target in LINK.findall(FENCE.sub("", read(doc))):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                path, _, anchor = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path \
                    else doc
                if not os.path.exists(os.path.join(ROOT, resolved)):
                    broken.append(f"{doc}: {target} (no {resolved})")
                elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                    broken.append(f"{doc}: {target} (no heading #{anchor} in {resolved})")
        self.assertEqual(broken, [])

    def test_server_flags_in_the_docs_exist_and_are_all_documented(self):
        # absl's --help: "    --name (description); default: ...;", one per flag.
        listed = set(re.findall(r"^    --([a-z0-9_]+) \(", help_text(ARGS.gemmserve), re.MULTILINE))
        self.assertGreater(len(listed), 30, "gemmserve --help lists its flags")
        table = set()
        for cell in re.findall(r"^\| ([^|]*`--[^|]*)\|", read("docs/flags.md"), re.MULTILINE):
            table |= set(re.findall(r"`--([a-z0-9_]+)`", cell))
        self.assertEqual(sorted(listed - table), [], "flags missing from docs/flags.md")
        self.assertEqual(sorted(table - listed), [], "docs/flags.md names flags gemmserve lacks")
        # Flags on a gemmserve command line anywhere in the docs.
        unknown = []
        for doc in documents():
            for line in read(doc).split("\n"):
                # A command word ending in gemmserve (not an assignment of its path).
                match = re.search(r"(?:^|[\s`(])(?:[\w./$-]*/)?gemmserve(?= |$)", line)
                if not match:
                    continue
                # The command's own flags: up to the end of its backticks or a pipe.
                command = re.split(r"[`|]", line[match.end():])[0]
                for flag in re.findall(r"--([a-z0-9_]+)", command):
                    if flag not in listed | {"help", "helpfull"}:
                        unknown.append(f"{doc}: --{flag}: {line.strip()}")
        self.assertEqual(unknown, [])

    def test_cli_commands_in_the_docs_exist(self):
        text = help_text(ARGS.cli)
        commands = set(re.findall(r"^  ([a-z][a-z-]+)", text, re.MULTILINE))
        self.assertIn("perf", commands)
        unknown = []
        for doc in documents():
            for command in re.findall(r"gemmserve-cli(?: --?[a-z_]+(?:[= ][^\s`]+)?)* ([a-z][a-z-]+)",
                                      read(doc)):
                if command not in commands:
                    unknown.append(f"{doc}: gemmserve-cli {command}")
        self.assertEqual(unknown, [])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--gemmserve", required=True)
    parser.add_argument("--cli", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
