"""Prints the median and the range of each benchmark configuration's repeated runs, from the JSON
lines measure.py appended (one per run), as one Markdown table."""
import json, statistics, sys
from collections import defaultdict

runs = defaultdict(list)
with open(sys.argv[1]) as lines:
    for line in lines:
        run = json.loads(line)
        runs[(run["accounts"], run["concurrency"], run["night"])].append(run)


def cell(values, format):
    median = format.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({format.format(min(values))}-{format.format(max(values))})"


print("| accounts | in flight | night | runs | wall s | accounts/s | of ceiling | client CPU ms/account"
      " | peak RSS MB | PostgreSQL CPU ms/account |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (accounts, concurrency, night), group in sorted(runs.items()):
    def column(name, format):
        return cell([run[name] for run in group], format)
    print(f"| {accounts:,} | {concurrency} | {night} | {len(group)} | {column('wall', '{:.1f}')} | {column('rate', '{:,.0f}')}"
          f" | {column('of_ceiling', '{:.2f}')} | {column('client_cpu_ms', '{:.3f}')} | {column('rss_mb', '{:.0f}')}"
          f" | {column('postgres_cpu_ms', '{:.3f}')} |")
