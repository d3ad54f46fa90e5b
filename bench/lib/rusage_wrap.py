#!/usr/bin/env python3
"""Runs a command (the rest of argv) and appends the CPU seconds of it and its children to the
file named by argv[1]: the bench passes it as git's `--upload-pack` to measure the server
process a real client talks to."""
import resource
import subprocess
import sys

code = subprocess.run(sys.argv[2:]).returncode
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "a") as log:
    log.write(f"{ru.ru_utime + ru.ru_stime:.4f}\n")
sys.exit(code)
