# idcli, the agentid CLI and reference server, as a static binary in a
# minimal image that runs as an unprivileged user.
#
#   docker build -t agentid .
#   docker run --rm agentid version
#   docker run --rm -p 127.0.0.1:3000:3000 -e DATABASE_URL=postgres://… agentid server start
#
# compose.yaml runs the reference server on PostgreSQL with it.

# The Go toolchain of go.mod's toolchain line (its go directive is the
# oldest release the module supports; images build with the newest patch).
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The release build (.ci/release): static (no cgo, so no PKCS#11), paths
# trimmed, stamped with the commit when it is passed in, since the build
# context leaves .git out:
#   docker build --build-arg COMMIT=$(git rev-parse HEAD) \
#     --build-arg COMMIT_TIME=$(git show -s --format=%ct) -t agentid .
ARG COMMIT=""
ARG COMMIT_TIME=""
ARG TARGETARCH=amd64
RUN go run ./.ci/release -binary linux/${TARGETARCH} -no-cgo -commit "${COMMIT}" -date "${COMMIT_TIME}" -o /out/idcli

# distroless static: CA certificates and time zones, no shell, and the
# unprivileged user nonroot (uid 65532).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/idcli /usr/local/bin/idcli
USER nonroot:nonroot
EXPOSE 3000
ENTRYPOINT ["/usr/local/bin/idcli"]
CMD ["server", "start"]
