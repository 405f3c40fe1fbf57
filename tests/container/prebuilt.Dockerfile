# The gate's image (tests/container.sh): the Dockerfile's runtime stage, built
# with `--target runtime`, plus the binaries and example models that the
# Release stage of tests/run.sh already built, in the places the Dockerfile's
# last stage puts them (tests/integration/test_deploy.py holds the two to the
# same destinations). The context is a folder container.sh fills:
#   bin/gemmserve, bin/gemmserve-cli, model_repository/, sharded/
ARG RUNTIME=gemmserve-runtime:test
FROM ${RUNTIME}
COPY bin/gemmserve bin/gemmserve-cli /usr/local/bin/
COPY model_repository /models
COPY sharded /sharded
