"""Top self and inclusive frames of a py-spy raw (collapsed) profile."""
import collections, sys
self_, incl, total = collections.Counter(), collections.Counter(), 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n); total += n
    frames = stack.split(";")
    self_[frames[-1]] += n
    for f in set(frames):
        incl[f] += n
k = int(sys.argv[2]) if len(sys.argv) > 2 else 15
print(f"{total} samples")
print("self:")
for f, n in self_.most_common(k):
    print(f"  {100*n/total:5.1f}%  {f[:150]}")
print("inclusive:")
for f, n in incl.most_common(k):
    print(f"  {100*n/total:5.1f}%  {f[:150]}")
