import sys

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def run():
    print(fib(27))


# The bench repeats the work (argv[1]) so that it lasts a few CPU-seconds.
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    run()
