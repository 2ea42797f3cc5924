# leasehold as a static binary on distroless, running as a non-root user.
#   docker build -t leasehold .
#   docker run -d --name leasehold -v leasehold:/var/lib/leasehold \
#     -v "$PWD/leasehold.yaml:/etc/leasehold/leasehold.yaml:ro" leasehold run --config /etc/leasehold/leasehold.yaml
#   docker exec leasehold leasehold status --config /etc/leasehold/leasehold.yaml
# The admin API listens on the container's loopback (127.0.0.1:7070) by
# default: -p 7070:7070 reaches nothing. To publish it, listen with
# --http 0.0.0.0:7070, which needs tokens, and -p 127.0.0.1:7070:7070;
# see docs/deploy.md. The config's backend must be in the volume
# (sqlite:///var/lib/leasehold/leasehold.db) or a server.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: the SQLite driver is pure Go (modernc), so the binary is
# static and runs on distroless/static, which has no libc.
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/leasehold ./cmd/leasehold

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/leasehold /usr/local/bin/leasehold
# The default SQLite database lives under $XDG_STATE_HOME.
ENV XDG_STATE_HOME=/var/lib/leasehold
USER nonroot:nonroot
EXPOSE 7070
ENTRYPOINT ["/usr/local/bin/leasehold"]
CMD ["--help"]
