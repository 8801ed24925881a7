class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y

    def add(self, o):
        return Vec(self.x + o.x, self.y + o.y)

    def dot(self, o):
        return self.x * o.x + self.y * o.y


acc = Vec(0, 0)
s = 0
for i in range(500000):
    v = Vec(i, -i)
    acc = acc.add(v)
    s += acc.dot(v) & 0xFFFF
print(s)
