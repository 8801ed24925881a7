words = ["alpha", "beta", "gamma", "delta", "epsilon"]
counts = {}
for i in range(600000):
    w = words[i % 5] + str(i % 97)
    counts[w] = counts.get(w, 0) + 1
print(len(counts))
