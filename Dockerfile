# syntax=docker/dockerfile:1
# Cardinal's three images, one target each, for machines with a container engine:
#
#   docker build --target scheduler-extender -t <registry>/scheduler-extender:<tag> .
#   docker build --target webhook            -t <registry>/webhook:<tag> .
#   docker build --target device-plugin      -t <registry>/device-plugin:<tag> .
#
# Without an engine, `make images` builds the same images as OCI tarballs (hack/images); the base
# images below are what those tarballs reproduce from the build host (see charts/cardinal/README.md).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static, no libc: the extender and the webhook only speak HTTP(S) to the API server.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/scheduler-extender ./cmd/webhook
# cgo (go-nvml dlopens libnvidia-ml.so.1), linked dynamically against glibc; the pure-Go resolver and
# user lookup keep NSS modules out of the process.
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -trimpath -tags netgo,osusergo -ldflags "-s -w" -o /out/ ./cmd/device-plugin

# Static binaries: distroless static (CA certificates, /etc/passwd, nothing else), non-root.
FROM gcr.io/distroless/static-debian12:nonroot AS scheduler-extender
COPY --from=build /out/scheduler-extender /usr/local/bin/scheduler-extender
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/scheduler-extender"]

FROM gcr.io/distroless/static-debian12:nonroot AS webhook
COPY --from=build /out/webhook /usr/local/bin/webhook
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/webhook"]

# glibc (the same 2.36 as the bookworm build stage), so the NVIDIA driver's libnvidia-ml.so.1, mounted
# in by the NVIDIA container toolkit or a hostPath, can be dlopened. Root: the plugin creates its socket
# in the kubelet's root-owned device-plugins directory.
FROM gcr.io/distroless/base-debian12 AS device-plugin
COPY --from=build /out/device-plugin /usr/local/bin/device-plugin
ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib
USER 0:0
ENTRYPOINT ["/usr/local/bin/device-plugin"]
