# The reference server (examples/server) as a container image: a static
# binary (CGO off; SQLite is pure Go) on a base with git and CA certificates
# (the server clones repositories itself, for either runtime), run as the
# non-root user 65532.
#
#   docker build -t keelson .
#
# Base images are build arguments so machines without a registry can use
# local ones (scripts/local-images.sh builds keelson/base:local, with git; a
# builder with Go is keelson/go:local):
#
#   GO_IMAGE       builder with a Go toolchain (and a POSIX sh)
#   RUNTIME_IMAGE  the image the server runs on: it needs sh; git and CA
#                  certificates are installed with apk when it lacks them
#                  (alpine), or it brings them (keelson/base:local).
#
# Every role runs from this image. The default role (all) and workers build
# and run apps on the Docker engine whose socket is mounted; README
# "Self-hosting kit" gives the docker run line. A vendor/ directory in the
# build context (go mod vendor) is used when present, so the build needs no
# module proxy. .dockerignore keeps .git, data/ and secrets out of the context.
ARG GO_IMAGE=golang:1.26-alpine
ARG RUNTIME_IMAGE=alpine:3.22

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY . .
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
RUN if [ -d vendor ]; then mod=-mod=vendor; else mod=-mod=readonly; fi; \
    go build $mod -ldflags='-s -w' -o /out/keelson ./examples/server && \
    mkdir -p /out/data

FROM ${RUNTIME_IMAGE}
USER 0
# iptables: the docker runtime keeps its egress fence in the host's firewall
# (KEELSON_EGRESS=fenced, the default), so the server needs it, root and
# NET_ADMIN on the host's network.
RUN if ! command -v git >/dev/null 2>&1 || [ ! -s /etc/ssl/certs/ca-certificates.crt ] || ! command -v iptables >/dev/null 2>&1; then \
      apk add --no-cache git ca-certificates iptables; \
    fi && git --version && iptables --version
COPY --from=build /out/keelson /usr/local/bin/keelson
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV KEELSON_DATA_DIR=/data KEELSON_ADDR=:8080 KEELSON_INGRESS_ADDR=:8081 HOME=/data
EXPOSE 8080 8081
VOLUME /data
ENTRYPOINT ["/usr/local/bin/keelson"]
