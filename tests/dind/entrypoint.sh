#!/bin/sh
# Start sshd and dockerd in a container without --privileged: /sys and the cgroup
# hierarchies are remounted read-write (the container has CAP_SYS_ADMIN), the keys and
# certificates come from /seed (authorized_keys, ssh_host_ed25519_key, ca.pem,
# server-cert.pem, server-key.pem).
set -eu
mount -o remount,rw /sys 2>/dev/null || echo "dind: /sys stays read-only" >&2
if [ -d /sys/fs/cgroup ]; then
    mount -o remount,rw /sys/fs/cgroup 2>/dev/null || true
    # cgroup v1: each hierarchy is a read-only bind mount of this container's cgroup.
    for d in /sys/fs/cgroup/*; do
        [ -d "$d" ] && ! [ -L "$d" ] && mount -o remount,bind,rw "$d" 2>/dev/null || true
    done
fi
# IPv6 on the engine's networks (the escape suite's local internet has it): Docker mounts
# /proc/sys read-only; its net/ part is this container's own namespace, so only that part
# is made writable, and IPv6 turned on in it.
if mount --bind /proc/sys/net /proc/sys/net 2>/dev/null \
        && mount -o remount,bind,rw /proc/sys/net 2>/dev/null; then
    for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 /proc/sys/net/ipv6/conf/default/disable_ipv6; do
        if [ -e "$f" ]; then echo 0 > "$f" || true; fi
    done
else
    echo "dind: /proc/sys/net stays read-only (no IPv6 networks)" >&2
fi
install -m 600 /seed/authorized_keys /root/.ssh/authorized_keys
install -m 600 /seed/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key
/usr/sbin/sshd -o PasswordAuthentication=no -o PermitRootLogin=prohibit-password \
    -o HostKey=/etc/ssh/ssh_host_ed25519_key
driver=${DIND_STORAGE_DRIVER:-overlay2}
# Extra dockerd arguments, words separated by spaces (e.g. --insecure-registry HOST:PORT).
extra=${DIND_DOCKERD_ARGS:-}
# dockerd starts again when it ends (a test restarts the engine: `kill $(cat
# /var/run/docker.pid)`, as a host reboot would stop its containers); `docker rm -f` ends all.
while :; do
    # shellcheck disable=SC2086  # $extra is split into words on purpose
    dockerd --host unix:///var/run/docker.sock --host tcp://0.0.0.0:2376 \
        --tlsverify --tlscacert /seed/ca.pem --tlscert /seed/server-cert.pem \
        --tlskey /seed/server-key.pem --storage-driver "$driver" --log-level warn \
        $extra || true
    echo "dind: dockerd ended; starting it again" >&2
    sleep 0.5
done
