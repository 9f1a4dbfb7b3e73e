"""Runs one benchmark command and prints one Markdown table row of its figures.

Client CPU and peak RSS come from getrusage of the child; the simulator's CPU from /proc; the
PostgreSQL CPU from the postmaster's own and its children's times (reaped backends included)
plus the backends still alive.
"""
import argparse, json, math, os, resource, subprocess, sys, time, urllib.request

TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid, children=False):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[11..14] are utime, stime, cutime, cstime (after pid and comm are cut off)
    total = int(fields[11]) + int(fields[12])
    if children:
        total += int(fields[13]) + int(fields[14])
    return total / TICKS


def postgres_cpu(postmaster):
    total = proc_cpu(postmaster, children=True)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                if parent == postmaster:
                    total += proc_cpu(int(entry))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                pass
    return total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--simulator", type=int)
    parser.add_argument("--postmaster", type=int)
    parser.add_argument("--accounts", type=int)
    parser.add_argument("--concurrency", type=int)
    parser.add_argument("--latency-ms", type=float)
    parser.add_argument("--tail", type=float, default=1)
    parser.add_argument("--port", type=int)
    parser.add_argument("--database-url")
    parser.add_argument("--night", default="1")
    parser.add_argument("--json-out", help="also append the figures, as one JSON line, to this file")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command and args.command[0] == "--" else args.command

    def apple_requests():
        with urllib.request.urlopen(f"http://127.0.0.1:{args.port}/__stats") as response:
            return json.load(response)["apple_requests"]

    simulator_before = proc_cpu(args.simulator)
    postgres_before = postgres_cpu(args.postmaster)
    requests_before = apple_requests()
    started = time.monotonic()
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    simulator = proc_cpu(args.simulator) - simulator_before
    # The run's backends exit with it; their time reaches the postmaster's children's times only
    # once it has reaped them, and in between they count nowhere.
    time.sleep(1)
    postgres = postgres_cpu(args.postmaster) - postgres_before
    requests = apple_requests() - requests_before
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout + completed.stderr)
        sys.exit(f"the run failed with status {completed.returncode}")

    # Every account's entitlements must be what the world says after this night: each product's
    # state and expiry, entitled exactly for the states that grant (the bench world keeps expiries
    # out of the expiry lag's hour), and no entitlement the world does not have.
    check = subprocess.run(
        ["psql", "-At", args.database_url, "-c",
         "SELECT count(*) FILTER (WHERE x.state = e.state AND x.expires_at IS NOT DISTINCT FROM e.expires_at"
         " AND x.entitled = (e.state = 'active')) || '/' || count(*) || '/' || (SELECT count(*) FROM iap.entitlements)"
         " FROM bench_expected e LEFT JOIN iap.entitlements x ON x.account_id = e.account_id AND x.product_id = e.product_id"
         f" WHERE e.night = {int(args.night)}"],
        stdout=subprocess.PIPE, text=True).stdout.strip()
    right, expected, stored = (check.split("/") + ["?", "?", "?"])[:3]
    if not (right == expected == stored):
        sys.exit(f"wrong entitlements after the run: {right} of {expected} right, {stored} stored")
    check = f"{right}/{expected}"
    rate = args.accounts / wall
    # The ceiling is C over the mean answer time: with a tail (log-normal, p99 = tail x median)
    # the mean is the median x exp(sigma^2 / 2).
    sigma = math.log(args.tail) / 2.326348 if args.tail > 1 else 0
    ceiling = args.concurrency / (args.latency_ms * math.exp(sigma * sigma / 2) / 1000)
    client_cpu = usage.ru_utime + usage.ru_stime
    print(f"| {args.accounts:,} | {args.concurrency} | {args.night} | {wall:.1f} | {rate:,.0f} | {rate / ceiling:.2f} | "
          f"{client_cpu * 1000 / args.accounts:.3f} | {usage.ru_maxrss / 1024:.0f} | {requests:,} | {simulator:.1f} | "
          f"{postgres:.1f} | {postgres * 1000 / args.accounts:.3f} | {check} |")
    sys.stdout.flush()
    if args.json_out:
        with open(args.json_out, "a") as out:
            out.write(json.dumps({
                "accounts": args.accounts, "concurrency": args.concurrency, "night": int(args.night), "wall": wall,
                "rate": rate, "of_ceiling": rate / ceiling, "client_cpu_ms": client_cpu * 1000 / args.accounts,
                "rss_mb": usage.ru_maxrss / 1024, "requests": requests, "simulator_cpu": simulator,
                "postgres_cpu": postgres, "postgres_cpu_ms": postgres * 1000 / args.accounts}) + "\n")


main()
