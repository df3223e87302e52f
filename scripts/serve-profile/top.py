"""Top self and inclusive frames of a py-spy raw (collapsed) profile: top.py FILE [N]."""

import collections
import sys


def main() -> None:
    self_: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    with open(sys.argv[1]) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            n = int(count)
            total += n
            frames = stack.split(";")
            self_[frames[-1]] += n
            for frame in set(frames):
                incl[frame] += n
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    print(f"{total} samples")
    for title, counter in (("self", self_), ("inclusive", incl)):
        print(f"{title}:")
        for frame, n in counter.most_common(k):
            print(f"  {100 * n / total:5.1f}%  {frame[:150]}")


if __name__ == "__main__":
    main()
