#!/bin/sh
# The Debian packages whose commands the tests (make test) or the benchmarks (make bench,
# `sh tools/system-packages.sh bench`) run, installed when missing. Tests: chromium drives
# the console and docs browser tests, kcat the Kafka front's test and its docs snippet,
# redis-cli, curl and openssl the docs snippets and the fronts' tests. Benchmarks:
# redis-server and redis-benchmark (the Redis peer), h2load (nghttp2-client) and wrk (the
# HTTP load). PostgreSQL, a server to configure and start, is tools/postgres.sh's.
# Python packages come from pyproject.toml; these are the commands pip cannot install.
# As root, or with sudo that asks for no password, apt-get installs what is missing;
# otherwise this says what to install and goes on: the tests that need it skip on a
# laptop and fail under CI (CI set), each naming what it misses.
set -eu

missing=""
need() {  # need COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 || missing="$missing $2"
}
need chromium chromium
need kcat kcat
need redis-cli redis-tools
need curl curl
need openssl openssl
if [ "${1:-tests}" = bench ]; then
    need redis-server redis-server
    need redis-benchmark redis-tools
    need h2load nghttp2-client
    need wrk wrk
fi
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root="sudo -n"
else
    echo "warning: some tests need Debian's packages:$missing (apt-get install$missing)" >&2
    exit 0
fi
echo "installing Debian's packages:$missing"
$as_root apt-get update -qq
DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq $missing >/dev/null
