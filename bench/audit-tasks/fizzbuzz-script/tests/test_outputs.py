import subprocess


def fizz(n):
    return subprocess.run(["/app/fizz.sh", str(n)], capture_output=True, text=True).stdout.strip()


def test_fizz():
    assert fizz(9) == "Fizz"


def test_buzz():
    assert fizz(10) == "Buzz"


def test_fizzbuzz():
    assert fizz(45) == "FizzBuzz"


def test_plain():
    assert fizz(7) == "7"
