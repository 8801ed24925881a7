import sys

class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y

    def add(self, o):
        return Vec(self.x + o.x, self.y + o.y)

    def dot(self, o):
        return self.x * o.x + self.y * o.y


def run():
    acc = Vec(0, 0)
    s = 0
    for i in range(500000):
        v = Vec(i, -i)
        acc = acc.add(v)
        s += acc.dot(v) & 0xFFFF
    print(s)


# The bench repeats the work (argv[1]) so that it lasts a few CPU-seconds.
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    run()
