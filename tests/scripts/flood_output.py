"""Prints what no reader should hold whole: a 64 MiB line without a break, 50,000 short lines, 30 stderr lines of
64 KiB each, then fails (raytf issue 19: the host's memory and what it pushes stay under its caps; the log on
disk has every byte)."""

import sys

chunk = "x" * (1 << 20)
for _ in range(64):  # one line of 64 MiB, written a MiB at a time
    sys.stdout.write(chunk)
sys.stdout.write("\n")
sys.stdout.write("".join(f"line {i}\n" for i in range(50_000)))
for i in range(30):
    sys.stderr.write(f"E{i:02d} " + "e" * (64 << 10) + "\n")
sys.stderr.write("ValueError: flooded\n")
sys.exit(3)
