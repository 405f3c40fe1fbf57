"""Deployment artefacts, checked without Docker or Kubernetes (neither runs here):

- Dockerfile: every shared library `ldd` resolves for the built binaries comes
  from a package the runtime stage installs (`dpkg -S`), or from the few the
  debian:bookworm-slim base already holds; the build stage runs the commands CI
  runs (scripts/install_deps.sh, then CMake Release).
- deploy/k8s: every manifest parses, and the references between them hold:
  labels and selectors, ports and port names, probe services that the server
  registers for grpc.health.v1 and the HTTP probe path a live server answers, the metric the HPA scales on and the adapter
  rule that defines it from a metric a live server exports, the Envoy upstreams
  (gRPC and HTTP) that name the headless Service, flags the server accepts, and a termination
  grace longer than the server's own shutdown grace.
"""
import glob
import importlib.util
import os
import re
import subprocess
import unittest
import urllib.request

import yaml

from gemmserve_testing.server import ServerProcess, server_binary

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K8S = os.path.join(ROOT, "deploy", "k8s")
# In debian:bookworm-slim already: dependencies of its essential packages
# (dpkg, apt, coreutils).
BASE_IMAGE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}


def read(path):
    with open(path) as f:
        return f.read()


class DockerfileTest(unittest.TestCase):
    def stages(self):
        """The Dockerfile's stages in order, as (name or None, text after FROM)."""
        text = read(os.path.join(ROOT, "Dockerfile"))
        stages = []
        for stage in re.split(r"^FROM ", text, flags=re.M)[1:]:
            named = re.match(r"\S+ AS (\S+)", stage)
            stages.append((named.group(1) if named else None, stage))
        self.assertEqual([name for name, _ in stages], ["runtime", "build", None],
                         "expected the stages runtime, build, and the image")
        return stages

    def stage(self, name):
        return dict(self.stages())[name]

    def test_runtime_comes_first_and_the_image_is_it_with_the_built_files(self):
        # `docker build --target runtime` must build nothing else with the legacy
        # builder too, which runs every stage before the target.
        self.assertTrue(self.stages()[0][1].startswith("debian:bookworm-slim AS runtime"))
        image = self.stages()[-1][1]
        self.assertTrue(image.startswith("runtime\n"))
        prebuilt = read(os.path.join(ROOT, "tests", "container", "prebuilt.Dockerfile"))
        # The gate's image puts the Release stage's files where this one puts them.
        destinations = [re.findall(r"(?m)^COPY .* (\S+)$", text) for text in (image, prebuilt)]
        self.assertEqual(destinations[0], ["/usr/local/bin/", "/models", "/sharded"])
        self.assertEqual(destinations[0], destinations[1])
        sources = [re.findall(r"(?m)^COPY (?:--from=build )?(.*) \S+$", text)
                   for text in (image, prebuilt)]
        self.assertEqual([[os.path.basename(p) for p in line.split()] for line in sources[0]],
                         [[os.path.basename(p) for p in line.split()] for line in sources[1]])

    def test_runtime_stage_installs_every_library_the_binaries_load(self):
        runtime = self.stage("runtime")
        self.assertTrue(runtime.startswith("debian:bookworm-slim"))
        install = re.search(r"apt-get install -y --no-install-recommends(.*?)(?:&&|$)",
                            runtime.replace("\\\n", " "), re.S)
        self.assertIsNotNone(install, "runtime stage installs nothing")
        packages = set(install.group(1).split())
        binaries = [server_binary(), os.path.join(os.path.dirname(server_binary()), "gemmserve-cli")]
        loaded = {}  # each library's path as ldd gives it -> (real path, binary)
        for binary in binaries:
            ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True)
            for match in re.finditer(r"=> (/\S+)", ldd.stdout):
                loaded.setdefault(match.group(1), (os.path.realpath(match.group(1)), binary))
        # One dpkg query for every path, real and as linked (dpkg knows a library
        # by either): one pass over dpkg's file lists instead of one per path.
        candidates = sorted({p for path, (real, _) in loaded.items() for p in (path, real)})
        found = subprocess.run(["dpkg", "-S", *candidates], capture_output=True, text=True)
        owners = {}
        for line in found.stdout.splitlines():
            owner, _, owned = line.partition(": ")
            owners[owned.strip()] = owner.split(":")[0]
        for path, (real, binary) in sorted(loaded.items()):
            owner = owners.get(real) or owners.get(path)
            self.assertIsNotNone(owner, f"{real} ({os.path.basename(binary)}) belongs "
                                        "to no Debian package")
            with self.subTest(library=os.path.basename(real)):
                self.assertTrue(owner in packages or owner in BASE_IMAGE_PACKAGES,
                                f"{real} comes from {owner}, which the runtime stage "
                                "does not install")

    def test_runtime_stage_is_non_root_with_healthcheck_and_exec_entrypoint(self):
        runtime = self.stage("runtime")
        self.assertRegex(runtime, r"(?m)^USER [1-9]")
        self.assertRegex(runtime, r"(?m)^EXPOSE 8000 8001 8002$")
        self.assertRegex(runtime, r'(?m)^HEALTHCHECK .*CMD \["gemmserve-cli", .*"health"\]')
        self.assertRegex(runtime, r'(?m)^ENTRYPOINT \["gemmserve"')

    def test_build_stage_runs_what_ci_runs(self):
        build = self.stage("build")
        tests_run = read(os.path.join(ROOT, "tests", "run.sh"))
        self.assertIn("install_deps.sh", build)
        self.assertIn("scripts/install_deps.sh", tests_run)
        for fragment in ("cmake -S", "-DCMAKE_BUILD_TYPE=Release", "cmake --build"):
            self.assertIn(fragment, build)
            self.assertIn(fragment, tests_run)


class KubernetesManifestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = []
        for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
            for doc in yaml.safe_load_all(read(path)):
                if doc:
                    cls.docs.append(doc)

    def find(self, kind, name=None):
        found = [d for d in self.docs if d["kind"] == kind and
                 (name is None or d["metadata"]["name"] == name)]
        self.assertTrue(found, f"no {kind} {name or ''}")
        return found

    def deployment(self):
        return self.find("Deployment", "gemmserve")[0]

    def container(self):
        return self.deployment()["spec"]["template"]["spec"]["containers"][0]

    def test_every_manifest_parses_and_has_kind_and_name(self):
        self.assertGreaterEqual(len(self.docs), 9)
        for doc in self.docs:
            self.assertIn("apiVersion", doc)
            self.assertIn("name", doc["metadata"])

    def test_selectors_match_the_pod_labels(self):
        deployment = self.deployment()
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        self.assertLessEqual(deployment["spec"]["selector"]["matchLabels"].items(),
                             pod_labels.items())
        for service in self.find("Service"):
            if service["metadata"]["name"].startswith("gemmserve-envoy"):
                continue
            self.assertLessEqual(service["spec"]["selector"].items(), pod_labels.items())
        pdb = self.find("PodDisruptionBudget", "gemmserve")[0]
        self.assertLessEqual(pdb["spec"]["selector"]["matchLabels"].items(), pod_labels.items())
        self.assertLess(pdb["spec"]["minAvailable"], deployment["spec"]["replicas"])

    def test_ports_and_probes(self):
        c = self.container()
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, {"http": 8000, "grpc": 8001, "metrics": 8002})
        for probe in ("startupProbe", "readinessProbe"):
            self.assertEqual(c[probe]["grpc"]["port"], ports["grpc"], probe)
        liveness = c["livenessProbe"]["httpGet"]
        self.assertEqual(liveness["port"], ports["http"])
        # The probe's path is one a live server answers 200 without a token.
        server = ServerProcess().start()
        try:
            with urllib.request.urlopen(server.http_url + liveness["path"], timeout=10) as r:
                self.assertEqual(r.status, 200)
        finally:
            server.stop()
        # The server registers "" and the inference service with grpc.health.v1.
        self.assertIn(c["readinessProbe"]["grpc"].get("service", ""),
                      ("", "inference.GRPCInferenceService"))
        for service in self.find("Service"):
            if service["metadata"]["name"].startswith("gemmserve-envoy"):
                continue
            for port in service["spec"]["ports"]:
                self.assertIn(port["targetPort"], ports, service["metadata"]["name"])
                self.assertEqual(port["port"], ports[port["targetPort"]])
        headless = self.find("Service", "gemmserve-headless")[0]
        self.assertEqual(headless["spec"]["clusterIP"], "None")

    def test_resources_and_restricted_security(self):
        c = self.container()
        self.assertEqual(c["resources"]["requests"], c["resources"]["limits"])
        pod = self.deployment()["spec"]["template"]["spec"]
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertEqual(pod["securityContext"]["runAsUser"], 10001)  # the image's user
        self.assertEqual(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault")
        self.assertFalse(c["securityContext"]["allowPrivilegeEscalation"])
        self.assertEqual(c["securityContext"]["capabilities"]["drop"], ["ALL"])
        cpus = int(c["resources"]["limits"]["cpu"])
        self.assertIn(f"--compute_threads={cpus}", c["args"])

    def test_args_are_flags_the_server_accepts_and_grace_periods_nest(self):
        helpfull = subprocess.run([server_binary(), "--helpfull"], capture_output=True,
                                  text=True).stdout
        args = self.container()["args"]
        for arg in args:
            flag = arg.split("=")[0].lstrip("-")
            self.assertRegex(helpfull, rf"-{flag}\b", f"gemmserve has no flag {flag}")
        grace = int(next(a for a in args if a.startswith("--shutdown_grace_seconds")).split("=")[1])
        pod = self.deployment()["spec"]["template"]["spec"]
        self.assertGreater(pod["terminationGracePeriodSeconds"], grace)

    def test_autoscaler_scales_the_deployment_on_a_metric_the_server_exports(self):
        hpa = self.find("HorizontalPodAutoscaler", "gemmserve")[0]
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment")
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"], "gemmserve")
        metric = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
        config = yaml.safe_load(
            self.find("ConfigMap", "prometheus-adapter-gemmserve")[0]["data"]["config.yaml"])
        rules = {r["name"]["as"]: r for r in config["rules"]}
        self.assertIn(metric, rules)
        rule = rules[metric]
        used = set(re.findall(r"\b(gemmserve_[a-z_]+)", rule["seriesQuery"] + rule["metricsQuery"]))
        server = ServerProcess().start()
        try:
            with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
                live = set(re.findall(r"(?m)^(gemmserve_[a-z_]+)", r.read().decode()))
        finally:
            server.stop()
        self.assertTrue(used)
        self.assertLessEqual(used, live)
        monitor = self.find("ServiceMonitor", "gemmserve")[0]
        self.assertEqual(monitor["spec"]["endpoints"][0]["port"], "metrics")

    def test_envoy_balances_over_the_headless_service_with_the_probe_health_service(self):
        config = yaml.safe_load(self.find("ConfigMap", "gemmserve-envoy")[0]["data"]["envoy.yaml"])
        clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
        ports = {p["name"]: p["containerPort"] for p in self.container()["ports"]}
        for name, port in (("gemmserve", ports["grpc"]), ("gemmserve_http", ports["http"])):
            cluster = clusters[name]
            self.assertEqual(cluster["type"], "STRICT_DNS")
            self.assertEqual(cluster["lb_policy"], "ROUND_ROBIN")
            address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"][
                "address"]["socket_address"]
            self.assertTrue(address["address"].startswith("gemmserve-headless."))
            self.assertEqual(address["port_value"], port)
        self.assertEqual(
            clusters["gemmserve"]["health_checks"][0]["grpc_health_check"]["service_name"],
            self.container()["readinessProbe"]["grpc"]["service"])
        self.assertEqual(
            clusters["gemmserve_http"]["health_checks"][0]["http_health_check"]["path"],
            "/v2/health/ready")
        headless = {p["name"] for p in self.find("Service", "gemmserve-headless")[0]["spec"]["ports"]}
        self.assertLessEqual({"grpc", "http"}, headless)
        # Each listener routes to its own cluster, and the Envoy pod exposes it.
        envoy_ports = {p["containerPort"] for p in self.find("Deployment", "gemmserve-envoy")[0][
            "spec"]["template"]["spec"]["containers"][0]["ports"]}
        routed = set()
        for listener in config["static_resources"]["listeners"]:
            self.assertIn(listener["address"]["socket_address"]["port_value"], envoy_ports)
            manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
            route = manager["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
            routed.add(route["cluster"])
        self.assertEqual(routed, set(clusters))

class ShardedManifestsTest(unittest.TestCase):
    """deploy/k8s/sharded/ and deploy/docker-compose.sharded.yml name what the image's
    sharded repository (make_model_repository.py --sharded) expects: a headless Service
    per shard address, each shard's Deployment with its own repository and a PDB."""

    @classmethod
    def setUpClass(cls):
        cls.docs = [d for path in sorted(glob.glob(os.path.join(K8S, "sharded", "*.yaml")))
                    for d in yaml.safe_load_all(read(path)) if d]
        spec = importlib.util.spec_from_file_location(
            "make_model_repository", os.path.join(ROOT, "scripts", "make_model_repository.py"))
        cls.example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cls.example)

    def of(self, kind):
        return {d["metadata"]["name"]: d for d in self.docs if d["kind"] == kind}

    def test_each_shard_address_is_a_headless_service_over_its_own_deployment(self):
        services, deployments, pdbs = (self.of(k) for k in
                                       ("Service", "Deployment", "PodDisruptionBudget"))
        for j, address in enumerate(self.example.SHARD_ADDRESSES):
            host, port = address.removeprefix("dns:///").split(":")
            with self.subTest(address):
                service = services[host]
                self.assertEqual(service["spec"]["clusterIP"], "None")
                self.assertIn(int(port), [p["port"] for p in service["spec"]["ports"]])
                deployment = next(d for d in deployments.values() if
                                  service["spec"]["selector"].items() <=
                                  d["spec"]["template"]["metadata"]["labels"].items())
                args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                self.assertIn(f"--model_repository=/sharded/shard{j}", args)
                self.assertGreaterEqual(deployment["spec"]["replicas"], 2)
                pdb = pdbs[deployment["metadata"]["name"]]
                self.assertLess(pdb["spec"]["minAvailable"], deployment["spec"]["replicas"])
        router = deployments["gemmserve-router"]["spec"]["template"]
        self.assertIn("--model_repository=/sharded/router", router["spec"]["containers"][0]["args"])
        # Behind the existing Envoy: the base Services (the headless one is Envoy's) select
        # the router's pods, and its PDB selects them only.
        base = {d["metadata"]["name"]: d for path in ("service.yaml",)
                for d in yaml.safe_load_all(read(os.path.join(K8S, path))) if d}
        for name in ("gemmserve", "gemmserve-headless"):
            self.assertLessEqual(base[name]["spec"]["selector"].items(),
                                 router["metadata"]["labels"].items(), name)
        self.assertEqual(pdbs["gemmserve-router"]["spec"]["selector"]["matchLabels"],
                         deployments["gemmserve-router"]["spec"]["selector"]["matchLabels"])

    def test_compose_services_are_the_shard_addresses(self):
        compose = yaml.safe_load(read(os.path.join(ROOT, "deploy", "docker-compose.sharded.yml")))
        for j, address in enumerate(self.example.SHARD_ADDRESSES):
            host = address.removeprefix("dns:///").split(":")[0]
            self.assertEqual(compose["services"][host]["command"],
                             [f"--model_repository=/sharded/shard{j}"])
        self.assertEqual(compose["services"]["router"]["command"],
                         ["--model_repository=/sharded/router"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
