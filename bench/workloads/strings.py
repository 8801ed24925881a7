import sys


def run():
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    counts = {}
    for i in range(600000):
        w = words[i % 5] + str(i % 97)
        counts[w] = counts.get(w, 0) + 1
    print(len(counts))


# The bench repeats the work (argv[1]) so that it lasts a few CPU-seconds.
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    run()
