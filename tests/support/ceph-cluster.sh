#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A throwaway single-node Ceph cluster for tests and benchmarks: one monitor and one OSD as plain
# processes on 127.0.0.1 under DIR, no mgr, no systemd, cephx on. Facts behind the settings:
# /work/shared/notes/ceph-single-node.md (Ceph 16.2, Debian 12).
#
#   ceph-cluster.sh start DIR [memstore|bluestore]  make DIR, start mon + OSD, create pool "rbd"
#   ceph-cluster.sh stop DIR                        kill both (SIGKILL, by recorded pid), rm DIR
#   ceph-cluster.sh kill-osd DIR                    SIGKILL the OSD (bluestore keeps its data)
#   ceph-cluster.sh start-osd DIR                   start the OSD again and wait until it is up
#
# After start, DIR/ceph.conf is a client configuration (mon address, admin keyring, short
# timeouts, see below) for rbd, ceph, librbd and bexd. Keep DIR short: admin socket paths are
# limited to about 107 bytes. memstore (the default) starts fastest but keeps data in RAM and
# loses it when the OSD dies; bluestore (a sparse file next to the OSD directory) survives
# kill-osd/start-osd.
set -euo pipefail

die() {
  echo "ceph-cluster: $*" >&2
  exit 1
}

# SIGKILLs the processes whose pids DIR/NAME.pid hold, for each NAME given, if they still run
# this cluster's ceph.conf, then waits (bounded) until they are gone, so that nothing writes into
# DIR any more.
kill_recorded() {
  local dir=$1 name pid pids=()
  shift
  for name in "$@"; do
    [[ -f $dir/$name.pid ]] || continue
    pid=$(<"$dir/$name.pid")
    rm -f "$dir/$name.pid"
    [[ $pid =~ ^[0-9]+$ ]] || continue
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/ceph.conf"; then
      kill -KILL "$pid" 2>/dev/null && pids+=("$pid")
    fi
  done
  for pid in "${pids[@]}"; do
    timeout 10 tail --pid="$pid" -s 0.05 -f /dev/null || true
  done
}

# Waits until the monitor reports `count` OSDs up (a client that starts earlier parks its ops
# and retries only every 5 s).
wait_osds_up() {
  local dir=$1 count=$2
  for _ in $(seq 600); do
    if ceph -c "$dir/ceph.conf" osd stat -f json 2>/dev/null | grep -q "\"num_up_osds\":$count"; then
      return 0
    fi
    sleep 0.1
  done
  die "the OSD did not come up within 60 s (logs in $dir/log)"
}

start_osd() {
  local dir=$1
  ceph-osd -f -i 0 -c "$dir/ceph.conf" >>"$dir/log/osd.out" 2>&1 &
  echo $! >"$dir/osd.pid"
  wait_osds_up "$dir" 1
}

write_conf() {
  local dir=$1 port=$2 fsid=$3 store=$4
  cat >"$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$port
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
keyring = $dir/keyring
run dir = $dir/run
admin socket = $dir/run/\$name.\$pid.asok
log file = $dir/log/\$name.log
auth allow insecure global id reclaim = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon mgr mkfs grace = 86400
paxos propose interval = 0.05
paxos min wait = 0.01
# Clients: an operation on a stopped OSD fails after 5 s instead of waiting for it forever, so
# tests see the error quickly.
rados osd op timeout = 5
client mount timeout = 10

[mon.a]
mon data = $dir/mon

[osd.0]
osd data = $dir/osd
osd objectstore = $store
osd class update on start = false
memstore device bytes = 4294967296
bluestore block path = $dir/osd-block
bluestore block create = true
bluestore block size = 8589934592
bluestore fsck on mkfs = false
bluestore fsck on mount = false
bdev aio poll ms = 10
EOF
}

start() {
  local dir=$1 store=${2:-memstore}
  [[ $store == memstore || $store == bluestore ]] || die "unknown store '$store'"
  [[ ! -e $dir ]] || [[ -z $(ls -A "$dir") ]] || die "$dir exists and is not empty"
  mkdir -p "$dir"/{mon,osd,run,log}
  dir=$(cd "$dir" && pwd)
  local fsid osd_uuid
  fsid=$(</proc/sys/kernel/random/uuid)
  osd_uuid=$(</proc/sys/kernel/random/uuid)

  ceph-authtool "$dir/keyring" --create-keyring --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
    --cap mgr 'allow *' >/dev/null
  ceph-authtool "$dir/keyring" --gen-key -n osd.0 --cap mon 'allow profile osd' \
    --cap osd 'allow *' >/dev/null

  # A port below the ephemeral range and outside the OSDs' 6800-7300; another one if the
  # monitor cannot bind it.
  local port attempt
  for attempt in 1 2 3 4 5; do
    port=$((10000 + RANDOM % 20000))
    write_conf "$dir" "$port" "$fsid" "$store"
    rm -rf "$dir/mon" && mkdir "$dir/mon"
    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$dir/monmap" >/dev/null
    ceph-mon --mkfs -i a -c "$dir/ceph.conf" --monmap "$dir/monmap" --keyring "$dir/keyring" \
      >>"$dir/log/mon.out" 2>&1
    ceph-mon -f -i a -c "$dir/ceph.conf" >>"$dir/log/mon.out" 2>&1 &
    echo $! >"$dir/mon.pid"
    if ceph -c "$dir/ceph.conf" --connect-timeout 10 osd new "$osd_uuid" 0 >/dev/null 2>&1; then
      break
    fi
    kill_recorded "$dir" mon
    [[ $attempt -lt 5 ]] || die "the monitor did not start (logs in $dir/log)"
  done

  ceph-osd --mkfs -i 0 --osd-uuid "$osd_uuid" -c "$dir/ceph.conf" >>"$dir/log/osd.out" 2>&1 ||
    die "ceph-osd --mkfs failed (logs in $dir/log)"
  start_osd "$dir"
  ceph -c "$dir/ceph.conf" osd pool create rbd 8 8 replicated >/dev/null 2>&1 ||
    die "cannot create pool rbd"
  rbd -c "$dir/ceph.conf" pool init rbd || die "rbd pool init failed"
}

stop() {
  local dir=$1
  [[ -d $dir ]] || return 0
  dir=$(cd "$dir" && pwd)
  kill_recorded "$dir" osd mon
  rm -rf "$dir"
}

case ${1:-} in
  start) start "${2:?DIR}" "${3:-memstore}" ;;
  stop) stop "${2:?DIR}" ;;
  kill-osd) kill_recorded "$(cd "${2:?DIR}" && pwd)" osd ;;
  start-osd) start_osd "$(cd "${2:?DIR}" && pwd)" ;;
  *)
    echo "usage: $0 start DIR [memstore|bluestore] | stop DIR | kill-osd DIR | start-osd DIR" >&2
    exit 2
    ;;
esac
