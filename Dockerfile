# leasehold as a static binary on distroless, running as a non-root user.
#   docker build -t leasehold .
#   docker run --rm -v leasehold:/var/lib/leasehold leasehold run --config /etc/leasehold/leasehold.yaml
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
