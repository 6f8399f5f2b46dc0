#!/bin/sh
# The PostgreSQL server the tests use (make test): postgresql://postgres@127.0.0.1:5432/test.
#
# Each step runs only when its result is missing, so a machine where that URL already
# answers is left exactly as it is, and a second run changes nothing:
#   1. Debian's postgresql, when no server binaries are installed;
#   2. a cluster (pg_createcluster), when the newest installed version has none;
#   3. the cluster started (pg_ctlcluster: there is no systemd in a container);
#   4. pg_hba.conf: `trust` for user postgres over loopback (127.0.0.1 and ::1), one
#      marked block at the top of the file, when a password-less connection is refused;
#   5. the database `test`.
# As root, or with sudo that asks for no password; otherwise this says what to do and
# goes on: the PostgreSQL tests skip on a laptop and fail under CI (CI set).
# TIDELOG_TEST_PG naming another server: that server is the tests', and nothing is done.
set -eu

DEFAULT_URL="postgresql://postgres@127.0.0.1:5432/test"
URL="${TIDELOG_TEST_PG:-$DEFAULT_URL}"
MARK="# tidelog tests: user postgres over loopback without a password (tools/postgres.sh)"

answers() {  # the tests' URL accepts a password-less connection and a query
    command -v psql >/dev/null 2>&1 &&
        PGCONNECT_TIMEOUT=3 psql "$URL" -XAtqc 'SELECT 1' >/dev/null 2>&1
}

if answers; then
    exit 0
fi
if [ "$URL" != "$DEFAULT_URL" ]; then
    echo "warning: TIDELOG_TEST_PG=$URL does not answer; the PostgreSQL tests will skip (fail under CI)" >&2
    exit 0
fi

if [ "$(id -u)" = 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root="sudo -n"
else
    echo "warning: the PostgreSQL tests need a server at $URL: install Debian's postgresql," \
        "let user postgres in over 127.0.0.1 without a password, and create the database test" \
        "(or run tools/postgres.sh as root); they skip meanwhile" >&2
    exit 0
fi

newest() {  # the newest installed server version, e.g. 15
    ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -n 1
}

# 1. the server's binaries
if [ -z "$(newest)" ] || [ ! -x "/usr/lib/postgresql/$(newest)/bin/postgres" ] ||
    ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "installing Debian's postgresql"
    $as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq postgresql >/dev/null
fi
version="$(newest)"

# 2. a cluster on port 5432 (the package makes `main`, unless told not to)
cluster="$(pg_lsclusters -h 2>/dev/null | awk -v v="$version" '$1 == v && $3 == 5432 { print $2; exit }')"
if [ -z "$cluster" ]; then
    echo "creating PostgreSQL $version cluster main on port 5432"
    $as_root pg_createcluster "$version" main --port 5432 >/dev/null
    cluster=main
fi
conf="/etc/postgresql/$version/$cluster"

# 3. running
if ! pg_ctlcluster "$version" "$cluster" status >/dev/null 2>&1; then
    echo "starting PostgreSQL $version cluster $cluster"
    $as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" start
fi
ready() {
    for _ in $(seq 30); do
        pg_isready -q -h 127.0.0.1 -p 5432 && return 0
        sleep 1
    done
    return 1
}
ready || true

# 4. loopback without a password, for user postgres only, when it is refused now
ADMIN_URL="postgresql://postgres@127.0.0.1:5432/postgres"
if ! PGCONNECT_TIMEOUT=3 psql "$ADMIN_URL" -XAtqc 'SELECT 1' >/dev/null 2>&1 &&
    ! $as_root grep -qF "$MARK" "$conf/pg_hba.conf"; then
    echo "letting user postgres in over loopback without a password ($conf/pg_hba.conf)"
    tmp="$(mktemp)"
    {
        echo "$MARK"
        echo "host    all    postgres    127.0.0.1/32    trust"
        echo "host    all    postgres    ::1/128         trust"
        echo
        $as_root cat "$conf/pg_hba.conf"
    } >"$tmp"
    $as_root cp "$tmp" "$conf/pg_hba.conf"
    rm -f "$tmp"
    $as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$cluster" reload
    ready || true
fi

# 5. the database
if ! psql "$ADMIN_URL" -XAtqc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1; then
    echo "creating database test"
    psql "$ADMIN_URL" -Xqc "CREATE DATABASE test" >/dev/null || true
fi

if answers; then
    echo "PostgreSQL answers at $URL"
else
    echo "warning: PostgreSQL was set up but $URL does not answer; the PostgreSQL tests will skip (fail under CI)" >&2
fi
