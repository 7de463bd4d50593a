# The builder-monitor daemon: built with the Rust toolchain image, run as a non-root user on a
# slim Debian with CA certificates (registries and the Kubernetes API are reached over TLS) and
# the time zone database ([rollout] windows name IANA zones).
#   docker build -t builder-monitor:0.1.0 .

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
# Cargo reads every target of the manifest, the benchmark's too.
COPY benches ./benches
# Without the line tables (119 → 27 MB; 24 MB fully stripped) but with the symbols, so a panic's
# backtrace still names its functions (RUST_BACKTRACE=1).
# The `dist` profile: whole-program LTO and one codegen unit (Cargo.toml), for what ships.
RUN cargo build --profile dist --locked --bin builder-monitor \
 && strip --strip-debug target/dist/builder-monitor

FROM debian:bookworm-slim
# git (and ssh for ssh:// remotes): [[gitops]] targets commit and push with the git program.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tzdata git openssh-client \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/dist/builder-monitor /usr/local/bin/builder-monitor
# The chart's securityContext runs as this user too (runAsNonRoot needs a numeric UID).
USER 65532:65532
WORKDIR /var/lib/builder-monitor
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/builder-monitor"]
CMD ["run", "--log-format", "json", "--config", "/etc/builder-monitor/config.toml"]
