#!/bin/sh
# Starts one Basalt node of a StatefulSet (or of any set of hosts with stable names).
#
# The node's name is its stable host name (BASALT_NAME, default: the pod's host name, e.g. basalt-2). Its peers are
# the other members of the set: BASALT_REPLICAS names <set>-0 .. <set>-(N-1), reached as <name>.<BASALT_DOMAIN>
# (the headless service's domain). It listens on every interface and advertises its own stable DNS name. Extra
# arguments are passed to `basalt start` (e.g. --table demo:8:3).
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

peers=""
i=0
while [ "$i" -lt "$replicas" ]; do
  peer="$set_name-$i"
  if [ "$peer" != "$name" ]; then
    peers="${peers:+$peers,}$peer=$peer.$domain:$peer_port"
  fi
  i=$((i + 1))
done

exec "${BASALT_NODE:-node}" "${BASALT_MAIN:-/app/dist/src/cli/main.js}" start \
  --name "$name" \
  --host 0.0.0.0 \
  --port "$peer_port" \
  --advertise "$name.$domain" \
  --peers "$peers" \
  --data "${BASALT_DATA:-/data}" \
  --client-port "${BASALT_CLIENT_PORT:-10800}" \
  --metrics-port "${BASALT_METRICS_PORT:-10900}" \
  "$@"
