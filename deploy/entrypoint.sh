#!/bin/sh
# Starts one Basalt node of a StatefulSet (or of any set of hosts with stable names).
#
# The node's name is its stable host name (BASALT_NAME, default: the pod's host name, e.g. basalt-2). Its peers are
# the other members of the set: BASALT_REPLICAS names <set>-0 .. <set>-(N-1), reached as <name>.<BASALT_DOMAIN>
# (the headless service's domain). It listens on every interface and advertises its own stable DNS name. Extra
# arguments are passed to `basalt start` (e.g. --table demo:8:3).
#
# Certificates (secure by default: a node off loopback refuses to start without them): with `init-certs` as the first
# argument it only writes this pod's node certificate into BASALT_CERTS_DIR (default /certs), signed by the CA in
# BASALT_CA_DIR (ca.crt and ca.key, a Secret mounted into the init container only), naming the member, its stable DNS
# name and BASALT_CERT_HOSTS (comma separated: the client service's names); the CA key is not copied. Started
# normally, it passes --certs-dir BASALT_CERTS_DIR when node.crt is there, else --insecure if BASALT_INSECURE=1,
# else neither (and basalt start refuses, naming the flag).
set -eu

name="${BASALT_NAME:-$(hostname)}"
replicas="${BASALT_REPLICAS:?set BASALT_REPLICAS to the number of nodes}"
domain="${BASALT_DOMAIN:?set BASALT_DOMAIN to the domain the nodes resolve in, e.g. basalt.default.svc.cluster.local}"
peer_port="${BASALT_PEER_PORT:-7000}"
set_name="${BASALT_SET:-${name%-*}}"
case "$name" in
  "$set_name"-[0-9]*) ;;
  *) echo "basalt entrypoint: node name '$name' is not <set>-<ordinal> of set '$set_name'" >&2; exit 2 ;;
esac

node_bin="${BASALT_NODE:-node}"
main="${BASALT_MAIN:-/app/dist/src/cli/main.js}"
certs="${BASALT_CERTS_DIR:-/certs}"

if [ "${1:-}" = "init-certs" ]; then
  ca="${BASALT_CA_DIR:?set BASALT_CA_DIR to the directory of ca.crt and ca.key (the CA secret)}"
  mkdir -p "$certs"
  cp "$ca/ca.crt" "$certs/ca.crt"
  set -- cert create-node "$name" --certs-dir "$certs" --host "$name.$domain" --overwrite
  old_ifs="$IFS"
  IFS=','
  for host in ${BASALT_CERT_HOSTS:-}; do
    [ -n "$host" ] && set -- "$@" --host "$host"
  done
  IFS="$old_ifs"
  # create-node signs with the CA key: a copy lives next to the new key only while it signs.
  cp "$ca/ca.key" "$certs/ca.key"
  status=0
  "$node_bin" "$main" "$@" || status=$?
  rm -f "$certs/ca.key"
  exit "$status"
fi

security=""
if [ -f "$certs/node.crt" ]; then
  security="--certs-dir $certs"
elif [ "${BASALT_INSECURE:-}" = "1" ]; then
  security="--insecure"
fi

peers=""
i=0
while [ "$i" -lt "$replicas" ]; do
  peer="$set_name-$i"
  if [ "$peer" != "$name" ]; then
    peers="${peers:+$peers,}$peer=$peer.$domain:$peer_port"
  fi
  i=$((i + 1))
done

# $security is one flag or two words without spaces (the certs path must have none).
# shellcheck disable=SC2086
exec "$node_bin" "$main" start $security \
  --name "$name" \
  --host 0.0.0.0 \
  --port "$peer_port" \
  --advertise "$name.$domain" \
  --peers "$peers" \
  --data "${BASALT_DATA:-/data}" \
  --client-port "${BASALT_CLIENT_PORT:-10800}" \
  --metrics-port "${BASALT_METRICS_PORT:-10900}" \
  "$@"
