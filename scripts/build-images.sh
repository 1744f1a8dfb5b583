#!/usr/bin/env bash
# Build lwl's images where no registry can be reached: a Debian bookworm base made with
# debootstrap and `docker import` (lwl-base:bookworm), lwl's image on it (lwl:latest), and
# Redis / PostgreSQL images from Debian's packages on the same base. Needs root, docker and
# debootstrap (apt-get install docker.io debootstrap). torch comes from the local wheel pip
# finds here (PIP_FIND_LINKS) when there is one; this machine's CA bundle is trusted in the
# builds (a TLS-intercepting proxy between the builds and PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=lwl-base:bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  root=$(mktemp -d)
  echo "debootstrap bookworm ($MIRROR) ..."
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$root" "$MIRROR" >/dev/null
  tar -C "$root" -c . | docker import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8' - "$BASE" >/dev/null
  rm -rf "$root"
fi

for dir in ${PIP_FIND_LINKS:-} /opt/wheels; do
  cp "$dir"/torch-2.13.0*.whl docker/wheels/ 2>/dev/null && break || true
done
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt docker/certs/build-host.crt

docker build -q --build-arg BASE="$BASE" -t lwl:latest . >/dev/null
docker build -q --build-arg BASE="$BASE" -t lwl-redis:bookworm docker/redis >/dev/null
docker build -q --build-arg BASE="$BASE" -t lwl-postgres:bookworm docker/postgres >/dev/null
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^(lwl|lwl-base|lwl-redis|lwl-postgres):'
