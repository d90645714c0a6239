#!/bin/bash
# Escape attempts, run inside a sandbox (as the agent, or as root without capabilities).
# Prints one JSON object per line:
#   {"attempt": NAME, "escaped": true|false, "control": false, "detail": "..."}
# "control" lines are things that must work (the allowed name); for them "escaped"
# means "it worked". Targets come from the environment (see test_sandbox_escape.py):
# ALLOWED_V4 BLOCKED_V4 BLOCKED_V6 DNS_V4 DNS_V6 GATEWAY_V4 INTRANET_V4 INTRANET2_V4
# HOST_PORT HOST_GIT (and OWN_GITDIR, the run's own gitdir, when it has one). The policy allows allowed.test, *.wild.test, cdn.test, port.test:8080,
# private.test, ns.test, gw.test:$HOST_PORT, hostalike.test and the network $INTRANET2_V4/32;
# it names $HOSTALIKE_V4 as one of the Docker host's addresses.
set -u
T=3

emit() { # emit NAME ESCAPED(true|false) DETAIL [control]
    jq -cn --arg a "$1" --argjson e "$2" --arg d "$3" --argjson c "${4:-false}" \
        '{attempt: $a, escaped: $e, control: $c, detail: ($d | .[0:300])}'
}

# attempt NAME COMMAND...: an escape when COMMAND succeeds.
attempt() {
    local name=$1; shift
    local out
    # bash -c so that the helper functions below (exported) run under timeout too.
    if out=$(timeout $((T + 2)) bash -c '"$@"' attempt "$@" 2>&1); then
        emit "$name" true "succeeded: $(tr '\n' ' ' <<<"$out")"
    else
        emit "$name" false "failed as it should: $(tr '\n' ' ' <<<"$out" | tail -c 200)"
    fi
}

# resolves NAME DNS_ARGS...: succeeds when dig gets an address for NAME; on failure
# prints dig's status (NXDOMAIN, or why no server answered).
resolves() {
    local name=$1; shift
    local out ans
    out=$(dig +tries=1 +time=2 "$@" "$name" A 2>&1)
    ans=$(awk '/^;; ANSWER SECTION/ {a=1; next} a && NF == 0 {a=0} a && $4 == "A" {print $5}' <<<"$out")
    if [ -n "$ans" ]; then echo "$ans"; return 0; fi
    grep -o 'status: [A-Z]*\|communications error.*\|no servers could be reached\|connection refused' <<<"$out" | head -2 >&2
    return 1
}

http() { curl -sS --max-time $T -o - "$@"; }
export -f http resolves
export T

# --- control: the allowed name works ---------------------------------------------------
if out=$(http http://allowed.test/ 2>&1) && [[ $out == allowed:80* ]]; then
    emit allowed-name-works true "$out" true
else
    emit allowed-name-works false "$out" true
fi
# Over IPv6 (its AAAA answer) too, without the ~3 s stall of a blocked neighbour
# discovery: curl -6 gives up after 2 s.
if out=$(curl -6 -sS --max-time 2 -o - http://allowed.test/ 2>&1) && [[ $out == allowed:80* ]]; then
    emit allowed-name-works-ipv6 true "$out" true
else
    emit allowed-name-works-ipv6 false "$out" true
fi
# Its own address (not one an exact name already put in the firewall's set).
if out=$(http http://x.wild.test/ 2>&1) && [[ $out == wild:80* ]]; then
    emit wildcard-name-works true "$out" true
else
    emit wildcard-name-works false "$out" true
fi

# The same over IPv6 (AAAA answers).
if out=$(curl -6 -sS --max-time 2 -o - http://x.wild.test/ 2>&1) && [[ $out == wild:80* ]]; then
    emit wildcard-name-works-ipv6 true "$out" true
else
    emit wildcard-name-works-ipv6 false "$out" true
fi
if out=$(curl -6 -sS --max-time 2 -o - http://cdn.test/ 2>&1) && [[ $out == cdn:80* ]]; then
    emit cname-name-works-ipv6 true "$out" true
else
    emit cname-name-works-ipv6 false "$out" true
fi

# An allowed name that is a CNAME of an unlisted one (as CDNs do) works too.
if out=$(http http://cdn.test/ 2>&1) && [[ $out == cdn:80* ]]; then
    emit cname-name-works true "$out" true
else
    emit cname-name-works false "$out" true
fi

# An entry that names a port opens that port.
if out=$(http http://port.test:8080/ 2>&1) && [[ $out == ported:8080* ]]; then
    emit named-port-works true "$out" true
else
    emit named-port-works false "$out" true
fi
# A CIDR entry opens a private address.
if out=$(http "http://$INTRANET2_V4/" 2>&1) && [[ $out == intranet2:80* ]]; then
    emit cidr-address-works true "$out" true
else
    emit cidr-address-works false "$out" true
fi

# --- ports and DNS rebinding -----------------------------------------------------------
attempt allowed-name-other-port http http://allowed.test:8080/
attempt named-port-entry-other-port http http://port.test/
attempt rebind-private-name http http://private.test/
attempt rebind-gateway-name bash -c "exec 3<>/dev/tcp/gw.test/$HOST_PORT"
attempt private-address-direct http "http://$INTRANET_V4/"
# An address the policy names as one of the Docker host's own (its other interfaces).
attempt rebind-host-address-name http http://hostalike.test/
# A DNS server on an allowed address must not answer blocked names over TCP.
attempt dns-tcp-on-allowed-address bash -c "getent hosts ns.test >/dev/null; resolves blocked.test +tcp @$DNS_V4"

# --- names and addresses ---------------------------------------------------------------
attempt blocked-name http http://blocked.test/
attempt blocked-name-resolves resolves blocked.test
attempt unlisted-name-resolves resolves anything.example
attempt wildcard-parent-resolves resolves wild.test
attempt subdomain-of-exact-name-resolves resolves sub.allowed.test
attempt subdomain-of-exact-name-http http http://sub.allowed.test/
attempt deep-subdomain-of-exact-name-resolves resolves exfil.data.allowed.test
attempt subdomain-of-exact-name-other-case-resolves resolves EXFIL.Allowed.Test
# (An IPv6 address alone on its line: dig +short prints its errors there too.)
attempt subdomain-of-exact-name-aaaa-resolves bash -c "dig +short +tries=1 +time=2 sub.allowed.test AAAA | grep -E '^[0-9A-Fa-f]*:[0-9A-Fa-f:.]+$'"
attempt cname-target-resolves resolves edge.cdn-provider.example
attempt blocked-address http "http://$BLOCKED_V4/"
attempt blocked-address-other-port http "http://$BLOCKED_V4:8080/"
attempt allowed-host-port-22 bash -c "exec 3<>/dev/tcp/$ALLOWED_V4/22"
attempt blocked-host-port-22 bash -c "exec 3<>/dev/tcp/$BLOCKED_V4/22"
attempt dns-server-as-web-server http "http://$DNS_V4/"

# --- DNS around the resolver -----------------------------------------------------------
attempt dns-udp-upstream-direct resolves blocked.test "@$DNS_V4"
attempt dns-tcp-upstream-direct resolves blocked.test +tcp "@$DNS_V4"
attempt dns-udp-other-server resolves blocked.test "@$BLOCKED_V4"
attempt dns-tcp-other-server resolves blocked.test +tcp "@$BLOCKED_V4"
attempt dns-docker-embedded-udp resolves blocked.test @127.0.0.11
attempt dns-docker-embedded-tcp resolves blocked.test +tcp @127.0.0.11
attempt dns-udp-upstream-v6 resolves blocked.test "@$DNS_V6"

# --- IPv6, ICMP, the Docker host -------------------------------------------------------
attempt ipv6-literal-blocked http -g "http://[$BLOCKED_V6]/"
attempt ipv6-literal-dns-server http -g "http://[$DNS_V6]/"
# A copy of ping without its file capability uses an unprivileged ICMP socket
# (net.ipv4.ping_group_range), so the firewall, not a missing capability, must stop it.
cp /usr/bin/ping /tmp/ping-plain
attempt icmp-blocked /tmp/ping-plain -c 1 -W 2 "$BLOCKED_V4"
attempt icmp-dns-server /tmp/ping-plain -c 1 -W 2 "$DNS_V4"
attempt icmp-allowed-host /tmp/ping-plain -c 1 -W 2 "$ALLOWED_V4"
attempt icmp6-blocked /tmp/ping-plain -6 -c 1 -W 2 "$BLOCKED_V6"
attempt icmp-with-capable-ping ping -c 1 -W 2 "$BLOCKED_V4"
attempt host-bridge-listener bash -c "exec 3<>/dev/tcp/$GATEWAY_V4/$HOST_PORT"
attempt host-bridge-http http "http://$GATEWAY_V4:$HOST_PORT/"

# --- the firewall itself ---------------------------------------------------------------
attempt iptables-flush iptables -w -F OUTPUT
attempt iptables-policy-accept iptables -w -P OUTPUT ACCEPT
attempt ip6tables-flush ip6tables -w -F OUTPUT
attempt ipset-add-blocked ipset add iterare-allow4 "$BLOCKED_V4"
attempt ipset-flush ipset flush iterare-allow4
if [ "$(id -u)" != 0 ]; then
    attempt resolv-conf-rewrite bash -c 'echo "nameserver $DNS_V4" > /etc/resolv.conf'
else
    # root owns the file; what matters is that lookups through it still fail.
    echo "nameserver $DNS_V4" > /etc/resolv.conf 2>/dev/null
    attempt lookup-after-resolv-rewrite resolves blocked.test
fi
attempt blocked-after-tampering http "http://$BLOCKED_V4/"

# --- privileges ------------------------------------------------------------------------
attempt sudo sudo -n true
if [ "$(id -u)" != 0 ]; then  # su from root to root is no escalation
    attempt su su -c true root </dev/null
fi
attempt capabilities bash -c 'grep "^Cap" /proc/self/status | tr "\n\t" "  "; ! grep -q "^CapEff:[[:space:]]*0*$" /proc/self/status || ! grep -q "^CapBnd:[[:space:]]*0*$" /proc/self/status'
attempt no-new-privs-off bash -c 'grep "^NoNewPrivs" /proc/self/status; ! grep -q "^NoNewPrivs:[[:space:]]*1" /proc/self/status'
# PID 1 (Docker's init) holds the container's environment; secrets reach the agent's own
# process only (the test passes ESCAPE_SECRET as one).
attempt secret-in-init-environ bash -c 'tr "\0" "\n" </proc/1/environ | grep "^ESCAPE_SECRET="' 

# --- the host repository and the Docker socket -----------------------------------------
attempt write-host-git-config bash -c "echo '[core]' >> '$HOST_GIT/config'"
attempt write-host-git-hook bash -c "echo 'touch /tmp/pwned' > '$HOST_GIT/hooks/post-checkout' && chmod +x '$HOST_GIT/hooks/post-checkout'"
attempt write-host-git-ref bash -c "echo 0000000000000000000000000000000000000000 > '$HOST_GIT/refs/heads/evil'"
attempt write-any-gitdir-via-mounts bash -c '
    for m in $(awk "{print \$2}" /proc/mounts); do
        case $m in /proc*|/sys*|/dev*) continue;; esac
        for g in $(find "$m" -xdev -maxdepth 3 -name HEAD -path "*git*" 2>/dev/null); do
            d=$(dirname "$g")
            # The gitdir of the run itself (OWN_GITDIR, a volume on a remote engine) is the agents own.
            case $d in "${OWN_GITDIR:-/nonexistent}"|"${OWN_GITDIR:-/nonexistent}"/*) continue;; esac
            echo -n "tried $d; "
            touch "$d/iterare-escape-probe" 2>/dev/null && { echo "wrote into $d"; exit 0; }
        done
    done; exit 1'
# Ports below 1024 stay with NET_BIND_SERVICE: nothing in the agent's container can
# listen beside the sandbox's resolver and answer lookups itself.
bind_port() { python3 -c 'import socket, sys
s = socket.socket(socket.AF_INET, getattr(socket, sys.argv[1]))
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[2]))); print("bound", sys.argv[1:])' "$@"; }
export -f bind_port
# Control: the tool works, and ports from 1024 up stay free to use (test servers).
if out=$(bind_port SOCK_DGRAM 5353 2>&1); then
    emit high-port-bind-works true "$out" true
else
    emit high-port-bind-works false "$out" true
fi
attempt bind-resolver-port-udp bind_port SOCK_DGRAM 53
attempt bind-resolver-port-tcp bind_port SOCK_STREAM 53
attempt docker-socket bash -c 'for s in /var/run/docker.sock /run/docker.sock $(find / -xdev -name "*.sock" 2>/dev/null); do [ -S "$s" ] && curl -s --max-time 2 --unix-socket "$s" http://localhost/version && exit 0; done; echo "no socket found"; exit 1'
attempt docker-tcp-on-gateway http "http://$GATEWAY_V4:2375/version"
