# SPDX-License-Identifier: GPL-2.0-or-later
# Shell functions for the guests' /init scripts (busybox sh, PID 1): tests/guest/guest-init.sh and
# perf/guest/fio-init.sh. build-initramfs.sh installs this file as /lib/guest-lib.sh; an /init
# sources it once busybox has installed its applets. The last console line of every guest is
# "BEXD-GUEST-RESULT: PASS" or "BEXD-GUEST-RESULT: FAIL <why>".

power_off() {
  sync
  poweroff -f
  # poweroff -f does not return; if it does, PID 1 must not exit (that panics the guest).
  while :; do sleep 60; done
}

fail() {
  echo "BEXD-GUEST-RESULT: FAIL $*"
  power_off
}

pass() {
  echo "BEXD-GUEST-RESULT: PASS"
  power_off
}

# The value of bexd.NAME on the kernel command line; empty when absent.
param() {
  tr ' ' '\n' </proc/cmdline | sed -n "s/^bexd\.$1=//p"
}

# Sets the shell variable NAME to the value of bexd.NAME; fails the guest when the command line
# lacks it.
require() {
  value=$(param "$1")
  [ -n "$value" ] || fail "the kernel command line lacks bexd.$1"
  eval "$1=\$value"
}

# Mounts /proc, /sys and /dev, puts the console on stdin, stdout and stderr, and loads the
# modules of /lib/modules/order (in that order).
start_guest() {
  mount -t proc proc /proc
  mount -t sysfs sysfs /sys
  mount -t devtmpfs devtmpfs /dev
  exec </dev/console >/dev/console 2>&1
  while read -r module; do
    insmod "/lib/modules/$module.ko" || fail "insmod $module"
  done </lib/modules/order
}
