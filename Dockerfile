# Rein's container image: one static `rein` binary on a small Alpine base.
#
#   docker build -t rein .
#   docker run --init -p 127.0.0.1:8080:8080 -v rein-data:/data \
#     -v "$PWD/tokens:/etc/rein/tokens:ro" rein serve --tokens /etc/rein/tokens
#
# The image listens on 0.0.0.0:8080 (REIN_ADDR), and `rein serve` refuses a
# non-loopback address without tokens, so give it a tokens file (one
# "TOKEN OWNER" per line) with --tokens or REIN_TOKENS. Sessions, runs and
# events go to SQLite in the /data volume (REIN_STORE) unless --store names
# a PostgreSQL database; the file tools' session folders go to
# /data/workspace. Stop it with time to drain: `docker stop -t 30` (the
# default 10 s equals --drain-timeout and leaves the drain no slack).
#
# Alpine rather than distroless or scratch: its busybox gives the
# HEALTHCHECK a wget and Kubernetes' preStop hooks a sleep (docs/deploy.md),
# at the cost of a few MiB.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so editing the source does not download them again.
COPY go.mod go.sum ./
RUN go mod download
# The context includes .git (see .dockerignore), so the binary records the
# revision it was built from and `rein version` can name it.
COPY . .
# CGO_ENABLED=0: the SQLite driver is pure Go, so the binary is static and
# runs on any base image.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o /out/rein ./cmd/rein

FROM alpine:3.22
# ca-certificates: for the HTTPS model providers and PostgreSQL over TLS.
# The rein user owns /data so that a fresh named volume mounted there is
# writable; a bind-mounted folder must be writable by uid 10001.
RUN apk add --no-cache ca-certificates \
 && addgroup -S -g 10001 rein \
 && adduser -S -D -H -u 10001 -G rein rein \
 && mkdir -p /data/workspace \
 && chown -R rein:rein /data
COPY --from=build /out/rein /usr/local/bin/rein
USER 10001:10001
WORKDIR /data
ENV REIN_ADDR=0.0.0.0:8080 \
    REIN_STORE=sqlite:/data/rein.db \
    REIN_WORKSPACE=/data/workspace
VOLUME /data
EXPOSE 8080
# /healthz says the process is up; /readyz (store reachable, not draining)
# is the one for a load balancer.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD wget -q -O /dev/null http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["rein"]
CMD ["serve"]
