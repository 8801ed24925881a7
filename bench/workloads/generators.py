import sys

def numbers(n):
    for i in range(n):
        yield i


def evens(it):
    for x in it:
        if x % 2 == 0:
            yield x


def squares(it):
    for x in it:
        yield x * x


def run():
    print(sum(squares(evens(numbers(2500000)))) % 1000003)


# The bench repeats the work (argv[1]) so that it lasts a few CPU-seconds.
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    run()
