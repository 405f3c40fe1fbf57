# gemmserve container: build with the project's own scripts, run on a slim
# Debian bookworm with only the shared libraries the binaries load.
#   docker build -t gemmserve .
#   docker run -p 8000:8000 -p 8001:8001 -p 8002:8002 gemmserve   # HTTP, gRPC, metrics
#   docker run -p 9001:9001 gemmserve --grpc_port=9001   # other ports: arguments
# tests/container.sh builds and runs it for real (docs/deployment.md).

# The runtime: everything of the image but gemmserve's own files. The first
# stage, so that `--target runtime` builds nothing else, with either builder:
# tests/container.sh adds the binaries its Release stage built to it
# (tests/container/prebuilt.Dockerfile) instead of compiling them again.
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 libblis4-openmp libgomp1 \
      libc-ares2 libre2-9 libssl3 libonnx1 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home gemmserve
USER 10001
EXPOSE 8000 8001 8002
# The server writes the address it listens on to /tmp (a tmpfs under
# --read-only), and the health check calls that one, so it follows ports moved
# by arguments; without the file it calls the default port.
HEALTHCHECK --interval=10s --timeout=3s CMD ["gemmserve-cli", "--url_file=/tmp/gemmserve.address", "health"]
ENTRYPOINT ["gemmserve", "--address_file=/tmp/gemmserve.address", "--grpc_port=8001", \
            "--http_port=8000", "--metrics_port=8002", "--model_repository=/models"]

FROM debian:bookworm-slim AS build
# The build stage's image is labelled so it can be removed once the runtime
# image is built: docker image prune -f --filter label=gemmserve.stage=build
LABEL gemmserve.stage=build
COPY scripts/install_deps.sh /src/scripts/install_deps.sh
RUN /src/scripts/install_deps.sh
COPY . /src
RUN cmake -S /src -B /src/build -DCMAKE_BUILD_TYPE=Release \
 && cmake --build /src/build -j"$(nproc)" --target gemmserve gemmserve-cli \
 && /usr/bin/python3 /src/scripts/make_model_repository.py /src/build/model_repository \
      --sharded /src/build/sharded

# The image: the runtime with the binaries and the example models built above.
FROM runtime
COPY --from=build /src/build/bin/gemmserve /src/build/bin/gemmserve-cli /usr/local/bin/
COPY --from=build /src/build/model_repository /models
# The example layer sharded in two (deploy/docker-compose.sharded.yml, deploy/k8s/sharded/).
COPY --from=build /src/build/sharded /sharded
