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


print(sum(squares(evens(numbers(2500000)))) % 1000003)
