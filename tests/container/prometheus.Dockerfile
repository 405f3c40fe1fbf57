# Prometheus from Debian's package, for the compose check of tests/container.sh:
# Docker Hub (prom/prometheus) is out of reach on the machines the suite runs
# on. Users keep the upstream image of deploy/docker-compose.yml.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/*
USER nobody
ENTRYPOINT ["/usr/bin/prometheus", "--config.file=/etc/prometheus/prometheus.yml", \
            "--storage.tsdb.path=/tmp/prometheus", "--web.listen-address=:9090"]
