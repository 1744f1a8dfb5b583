#!/bin/sh
# First start: a cluster with POSTGRES_USER (password auth from the network) and POSTGRES_DB.
set -eu
BIN=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp)
  printf '%s\n' "${POSTGRES_PASSWORD:?}" > "$pw"
  "$BIN/initdb" -D "$PGDATA" -U "${POSTGRES_USER:?}" --pwfile="$pw" -A scram-sha-256 >/dev/null
  rm -f "$pw"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  "$BIN/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  PGPASSWORD="$POSTGRES_PASSWORD" "$BIN/psql" -h /run/postgresql -U "$POSTGRES_USER" -d postgres \
    -c "CREATE DATABASE \"${POSTGRES_DB:-$POSTGRES_USER}\"" >/dev/null
  "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*'
