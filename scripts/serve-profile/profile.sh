#!/bin/bash
# py-spy profiles and per-thread CPU seconds of `harness serve` (server process and its engine worker)
# under N streaming clients. usage: profile.sh TAG N SECONDS
# needs the profile extra (pip install ".[all,profile]"); PROFILE_OUT (default /tmp/serve-profile) gets the results
set -e
TAG=$1; N=${2:-1}; S=${3:-40}
OUT=${PROFILE_OUT:-/tmp/serve-profile}/$TAG; mkdir -p $OUT
cd /tmp
eval "$(/root/dev/bin/harness models env)"
sed "s/n_parallel:4/n_parallel:$(( N > 4 ? N : 4 ))/; s/^  - enable_prefix_caching:true/  - enable_prefix_caching:false\n  - threads:2/" $(dirname "$0")/../../examples/models/smollm2-chat.yaml > $OUT/chat.yaml
/root/dev/bin/harness serve $OUT/chat.yaml --models-dir ~/.cache/harness/models --port 18555 > $OUT/serve.log 2>&1 &
SPID=$!
for i in $(seq 60); do curl -sf localhost:18555/v1/models >/dev/null && break; sleep 1; done
WPID=$(grep -o "engine worker pid [0-9]*" $OUT/serve.log | grep -o "[0-9]*$")
/root/dev/bin/python $(dirname "$0")/load.py http://127.0.0.1:18555 smollm2-chat $N 8 > /dev/null  # warm-up
threads() { for p in $SPID $WPID; do for t in /proc/$p/task/*; do echo "$p $(basename $t) $(cat $t/comm | tr ' ' _) $(awk '{print $14+$15}' $t/stat)"; done; done; }
threads > $OUT/cpu-before.txt
if [ -z "$NOSPY" ]; then
/root/dev/bin/py-spy record --nonblocking -r 100 -d $((S-5)) -f raw -o $OUT/server.txt -p $SPID > $OUT/spy1.log 2>&1 &
P1=$!
/root/dev/bin/py-spy record --nonblocking -r 100 -d $((S-5)) -f raw -o $OUT/worker.txt -p $WPID > $OUT/spy2.log 2>&1 &
P2=$!
fi
/root/dev/bin/python $(dirname "$0")/load.py http://127.0.0.1:18555 smollm2-chat $N $S > $OUT/load.json
threads > $OUT/cpu-after.txt
[ -z "$NOSPY" ] && { wait $P1 $P2 || true; }
kill $SPID; wait $SPID || true
cat $OUT/load.json
python3 - $OUT <<'PY'
import sys, collections
d = sys.argv[1]
def rd(f):
    return {(a, b): (c, int(t)) for a, b, c, t in (l.split() for l in open(f))}
b, a = rd(d + "/cpu-before.txt"), rd(d + "/cpu-after.txt")
agg = collections.Counter()
for k, (name, t) in a.items():
    dt = t - b.get(k, (name, 0))[1]
    agg[(k[0], name)] += dt
for (p, name), dt in sorted(agg.items(), key=lambda x: -x[1]):
    if dt: print(f"{p} {name:24s} {dt/100:7.2f} s")
PY
