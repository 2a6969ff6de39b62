"""A stand-in for torchrun: prints lines, forks grandchildren that would outlive it, then exits (orphaning them) or hangs.

    python tests/flows/dummy_job.py --pidfile F [--grandchildren N] [--lines N] [--exit-code C]
                                    [--hang] [--ignore-term]

The pids of this process and its grandchildren go to --pidfile (one per line) once they are all running,
so a test can check that none of them survives the launcher's cleanup.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pidfile", required=True)
    ap.add_argument("--grandchildren", type=int, default=0)
    ap.add_argument("--lines", type=int, default=3)
    ap.add_argument("--exit-code", type=int, default=0)
    ap.add_argument("--hang", action="store_true", help="sleep until killed")
    ap.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (needs the SIGKILL escalation)")
    args = ap.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Grandchildren ignore SIGTERM too when asked, and inherit our stdout (so they hold the pipe open).
    pre = "trap '' TERM; " if args.ignore_term else ""
    kids = [subprocess.Popen(["bash", "-c", f"{pre}sleep 300 & wait"]) for _ in range(args.grandchildren)]
    for i in range(args.lines):
        print(f"step {i} loss {10.0 / (i + 1):.3f}", flush=True)
    time.sleep(0.3)  # let bash start its sleep so the pid list below is complete
    pids = [os.getpid()] + [k.pid for k in kids]
    for k in kids:
        out = subprocess.run(["pgrep", "-P", str(k.pid)], capture_output=True, text=True).stdout
        pids += [int(p) for p in out.split()]
    tmp = args.pidfile + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(map(str, pids)) + "\n")
    os.replace(tmp, args.pidfile)
    if args.hang:
        while True:
            time.sleep(1)
    if args.exit_code:
        print(f"RuntimeError: rank 1 diverged (exit {args.exit_code})", file=sys.stderr, flush=True)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
