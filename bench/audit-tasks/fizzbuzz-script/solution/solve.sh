#!/bin/bash
set -e
cat > /app/fizz.sh <<'SH'
#!/bin/bash
n=$1
if (( n % 15 == 0 )); then echo FizzBuzz; elif (( n % 3 == 0 )); then echo Fizz; elif (( n % 5 == 0 )); then echo Buzz; else echo "$n"; fi
SH
chmod +x /app/fizz.sh
