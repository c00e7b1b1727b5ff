# ports.sh: free TCP ports on 127.0.0.1 for the servers the scripts start (PostgreSQL,
# Kafka brokers, relays' metrics listeners). Source it; it defines one function.
#
#   free_ports N   prints N distinct ports, each free when checked (bound and released)
#
# The ports are chosen below the kernel's ephemeral range (net.ipv4.ip_local_port_range):
# a port inside it can be taken by any outgoing connection between the check and the
# server's bind (CI saw PostgreSQL fail with "could not bind ... Address already in use"
# on 43572 while relays and Kafka clients were connecting). Nothing outside the range is
# handed out by the kernel, so only another server started at the same moment can race
# for it: callers that can retry on "address in use" should (scripts/pgtmp.sh does).
# Env: WALRELAY_PORT_RANGE=LO-HI overrides the range (e.g. a container that allows only
# some ports).
free_ports() {
  python3 - "$1" "${WALRELAY_PORT_RANGE:-}" <<'EOF'
import random, socket, sys
count, override = int(sys.argv[1]), sys.argv[2]
if override:
    lo, hi = (int(x) for x in override.split("-"))
else:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph_lo = int(f.read().split()[0])
    except OSError:
        eph_lo = 32768
    lo, hi = 10000, eph_lo - 1
    if hi - lo < 1000:  # an unusual kernel setting leaves no room below: use 1024 up
        lo = 1024
if lo > hi or lo < 1 or hi > 65535:
    sys.exit(f"free_ports: range {lo}-{hi} is not a port range")
candidates = list(range(lo, hi + 1))
random.shuffle(candidates)
picked = []
for p in candidates:
    s = socket.socket()  # no SO_REUSEADDR: fails on a listener and on a bound socket alike
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    picked.append(p)
    if len(picked) == count:
        print(" ".join(map(str, picked)))
        sys.exit(0)
sys.exit(f"free_ports: only {len(picked)} of {count} ports free in {lo}-{hi}")
EOF
}
