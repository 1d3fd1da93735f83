#!/usr/bin/env bash
# A Docker daemon whose layers live on a filesystem with per-container
# quotas, so that `--storage-opt size=` (a task's storage_mb) is enforced by
# the kernel: overlay2 on ext4, as on most hosts, cannot, and t1flow then only
# watches the writable layer (docs/verification.md, "storage_mb").
#
# It never touches the host's main daemon. It makes a sparse loop file
# (T1FLOW_XFS_GB, default 16 GB: only what is written is allocated, and it is
# mounted with discard, so what is deleted inside goes back to the host) under
# the state directory and formats it: XFS mounted with pquota for overlay2 where
# the kernel has XFS quotas (CONFIG_XFS_QUOTA), else btrfs with quota groups
# for Docker's btrfs driver (this host's kernel has no XFS quotas); the
# tools (xfsprogs or btrfs-progs) come from Debian, installed if missing.
# It mounts it at $RUN/mnt and starts a SECOND dockerd with its own data root
# there, its own socket, exec root, pidfile and containerd, and its own
# bridge (t1flow-xfs0; its daemon edits no iptables chains, and this script
# adds three NAT/forward rules that match only that bridge, for tasks with
# allow_internet).
# Never `--bridge none`: a dockerd started so deletes the host's docker0,
# the main daemon's default bridge. T1FLOW_XFS_FS=xfs|btrfs forces one.
# Point t1flow at it with
#   DOCKER_HOST=unix:///run/t1flow-xfs/docker.sock
# Idempotent: an answering daemon is left as it is. `stop` stops the daemon
# and unmounts (the loop file stays, with its images).
#
#   scripts/ensure-xfs-docker.sh [start|stop|status]
set -euo pipefail
STATE=${T1FLOW_HOME:-$(cd "$(dirname "$0")/.." && pwd)/.t1flow}
RUN=${T1FLOW_XFS_RUN:-/run/t1flow-xfs}
IMG=${T1FLOW_XFS_IMAGE:-$STATE/xfs/docker-xfs.img}
GB=${T1FLOW_XFS_GB:-16}
SOCK=unix://$RUN/docker.sock
MNT=$RUN/mnt

say() { echo "ensure-xfs-docker: $*" >&2; }
answers() { timeout 10 docker -H "$SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# Sandboxes of tasks with allow_internet (network "bridge") reach out through
# NAT rules of this bridge's own: the daemon runs with --iptables=false, so it
# never edits the chains the main daemon owns, and these three rules match
# only $BR's traffic (removed again by `stop`).
BR=${T1FLOW_XFS_BRIDGE:-t1flow-xfs0}
NET=${T1FLOW_XFS_BRIDGE_NET:-10.213.77.0/24}
RULES=("-t nat POSTROUTING -s $NET ! -o $BR -j MASQUERADE"
  "FORWARD -i $BR ! -o $BR -j ACCEPT"
  "FORWARD -o $BR -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT")
ensure_nat() {
  if ! command -v iptables >/dev/null; then
    say "no iptables: sandboxes of tasks with allow_internet get no internet on this daemon"; return 0
  fi
  local r
  for r in "${RULES[@]}"; do
    # shellcheck disable=SC2086 # each rule is words
    set -- $r
    if [ "$1" = -t ]; then
      iptables -t nat -C "${@:3}" 2>/dev/null || iptables -t nat -A "${@:3}"
    else
      iptables -C "$@" 2>/dev/null || iptables -I "$@"
    fi
  done
  [ "$(cat /proc/sys/net/ipv4/ip_forward)" = 1 ] || { say "enabling net.ipv4.ip_forward for allow_internet sandboxes"; echo 1 >/proc/sys/net/ipv4/ip_forward; }
}
drop_nat() {
  command -v iptables >/dev/null || return 0
  local r
  for r in "${RULES[@]}"; do
    # shellcheck disable=SC2086
    set -- $r
    if [ "$1" = -t ]; then iptables -t nat -D "${@:3}" 2>/dev/null || true; else iptables -D "$@" 2>/dev/null || true; fi
  done
}

case "${1:-start}" in
status)
  answers && docker -H "$SOCK" info --format '{{.Driver}} on {{index .DriverStatus 0}} {{index .DriverStatus 1}}' && exit 0
  say "not running"; exit 1 ;;
stop)
  if [ -f "$RUN/docker.pid" ]; then
    pid=$(cat "$RUN/docker.pid") # dockerd removes the file as it exits
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do [ -e "/proc/$pid" ] || break; sleep 0.5; done
  fi
  mountpoint -q "$MNT" && umount "$MNT"
  drop_nat
  exit 0 ;;
start) ;;
*) say "usage: $0 [start|stop|status]"; exit 2 ;;
esac

if answers; then
  [ "$(id -u)" != 0 ] || ensure_nat
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  say "needs root (a loop mount and a dockerd)"; exit 1
fi
# XFS project quotas need CONFIG_XFS_QUOTA; without them a pquota mount fails.
xfs_quota_ok() {
  grep -qw xfs /proc/filesystems || modprobe xfs 2>/dev/null || return 1
  if [ -r /proc/config.gz ]; then zcat /proc/config.gz | grep -q '^CONFIG_XFS_QUOTA=y'; return; fi
  [ -r "/boot/config-$(uname -r)" ] && grep -q '^CONFIG_XFS_QUOTA=[ym]' "/boot/config-$(uname -r)"
}
# btrfs quotas: simple quotas (squota, kernel 6.7+) where the kernel has
# them, else full quota groups. Full ones walk every snapshot that shares an
# extent at each commit, and every container and image layer of the btrfs
# driver is a snapshot of the base: measured here, `docker run --rm` took 5 s
# after 40 containers and 5 images (0.8 s on overlay2, 1.5 s on squota), a
# 4-layer build 3.4x overlay2's (squota 1.7x). A simple quota also counts only
# what the sandbox writes (the extents it owns), not its image's shared files.
# bookworm's btrfs-progs (6.2) has no `quota enable --simple`: the ioctl is
# then issued directly (BTRFS_IOC_QUOTA_CTL, cmd 4 = enable simple quota).
# T1FLOW_BTRFS_QUOTA=full forces full quota groups.
btrfs_mode() {
  local uuid; uuid=$(findmnt -no UUID "$MNT" 2>/dev/null || true)
  [ -n "$uuid" ] || uuid=$(btrfs filesystem show "$MNT" 2>/dev/null | sed -n 's/.*uuid: *//p' | head -n 1)
  cat "/sys/fs/btrfs/$uuid/qgroups/mode" 2>/dev/null || echo none
}
btrfs_quota() {
  local mode; mode=$(btrfs_mode)
  if [ "$mode" = none ] && [ "${T1FLOW_BTRFS_QUOTA:-simple}" != full ]; then
    btrfs quota enable --simple "$MNT" 2>/dev/null ||
      python3 -c 'import fcntl,os,struct,sys; fcntl.ioctl(os.open(sys.argv[1], os.O_RDONLY), 0xC0109428, struct.pack("QQ", 4, 0))' "$MNT" 2>/dev/null ||
      say "this kernel has no btrfs simple quotas (6.7+): full quota groups, slower with many containers"
    mode=$(btrfs_mode)
  fi
  [ "$mode" != none ] || { btrfs quota enable "$MNT"; mode=$(btrfs_mode); }
  if [ "$mode" = qgroup ] && [ "${T1FLOW_BTRFS_QUOTA:-simple}" != full ]; then
    say "btrfs quota mode: qgroup (full quota groups; this loop file was made so: stop, remove $IMG and start again for simple quotas)"
  else say "btrfs quota mode: $mode"; fi
}
FS=${T1FLOW_XFS_FS:-}
if [ -z "$FS" ]; then
  if xfs_quota_ok; then FS=xfs
  elif grep -qw btrfs /proc/filesystems || modprobe btrfs 2>/dev/null; then FS=btrfs
  else say "this kernel has neither XFS quotas nor btrfs: storage_mb stays watched"; exit 1
  fi
fi
need() { command -v "$1" >/dev/null || { say "installing Debian's $2"; apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }; }
mkdir -p "$(dirname "$IMG")" "$MNT" "$RUN/exec"
case $FS in
xfs) need mkfs.xfs xfsprogs; driver=overlay2; opts=loop,pquota,discard ;;
btrfs) need mkfs.btrfs btrfs-progs; driver=btrfs; opts=loop,discard=async ;;
*) say "T1FLOW_XFS_FS=$FS: want xfs or btrfs"; exit 2 ;;
esac
if [ ! -f "$IMG" ] || [ "$(cat "$IMG.fs" 2>/dev/null)" != "$FS" ]; then
  say "making a sparse ${GB} GB $FS file at $IMG"
  rm -f "$IMG"
  truncate -s "${GB}G" "$IMG"
  "mkfs.$FS" -q "$IMG" >/dev/null
  echo "$FS" >"$IMG.fs"
fi
if ! mountpoint -q "$MNT"; then
  mount -o "$opts" "$IMG" "$MNT"
fi
case $FS in
xfs) grep -q " $MNT xfs .*prjquota" /proc/mounts || { say "$MNT is not mounted with project quotas"; exit 1; } ;;
btrfs) btrfs_quota ;;
esac
if ! ip link show "$BR" >/dev/null 2>&1; then
  ip link add name "$BR" type bridge
  ip addr add "${T1FLOW_XFS_BRIDGE_CIDR:-10.213.77.1/24}" dev "$BR"
  ip link set "$BR" up
fi
ensure_nat
say "starting a second dockerd on $SOCK (data root $MNT/docker, log $RUN/dockerd.log)"
setsid nohup dockerd --data-root "$MNT/docker" --exec-root "$RUN/exec" --pidfile "$RUN/docker.pid" \
  -H "$SOCK" --bridge "$BR" --iptables=false --ip-masq=false --ip-forward=false --storage-driver "$driver" \
  >>"$RUN/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 1 60); do
  answers && exit 0
  sleep 0.5
done
say "dockerd did not answer within 30s; last lines of $RUN/dockerd.log:"
tail -n 20 "$RUN/dockerd.log" >&2
exit 1
