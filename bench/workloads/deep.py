"""Work done 40 frames deep."""


def level(n, k):
    if n == 0:
        s = 0
        for i in range(k):
            s += i % 7
        return s
    return level(n - 1, k)


t = 0
for _ in range(4000):
    t += level(40, 400)
print(t)
