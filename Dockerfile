# The reference server (examples/server) as a container image: a static
# binary (CGO off; SQLite is pure Go), run as a non-root user.
#
#   docker build -t keelson .
#
# Base images are build arguments so machines without a registry can use
# local ones (CI: .ci/docker-check.sh builds with keelson-test/go:1 and
# keelson-test/run:1 from .ci/runtime-images.sh):
#
#   GO_IMAGE       builder with a Go toolchain (and a POSIX sh)
#   RUNTIME_IMAGE  the image the server runs on. The final stage runs no
#                  command in it, so scratch-like images work. A worker that
#                  uses the process runtime (KEELSON_RUNTIME=process, the
#                  default) clones with git and builds with the apps'
#                  toolchains: give it an image that has them, e.g.
#                  --build-arg RUNTIME_IMAGE=golang:1.26-bookworm. API replicas
#                  (KEELSON_ROLE=api) need nothing but the binary.
#
# A vendor/ directory in the build context (go mod vendor) is used when
# present, so the build needs no module proxy.
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY . .
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
RUN if [ -d vendor ]; then mod=-mod=vendor; else mod=-mod=readonly; fi; \
    go build $mod -ldflags='-s -w' -o /out/keelson ./examples/server && \
    mkdir -p /out/data

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/keelson /usr/local/bin/keelson
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV KEELSON_DATA_DIR=/data KEELSON_ADDR=:8080 KEELSON_INGRESS_ADDR=:8081
EXPOSE 8080 8081
VOLUME /data
ENTRYPOINT ["/usr/local/bin/keelson"]
