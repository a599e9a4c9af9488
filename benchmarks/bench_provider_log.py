"""What the durable effect log costs: accepted effects per second, log on vs log off.

Two payments providers run side by side in this one run: one with the real log (SQLite,
WAL, ``synchronous=NORMAL``: every effect committed before the reply) and one started with the
hidden benchmark-only switch ``durable=False`` (``--no-log``: the same schema in an in-memory
database, so the same work minus the disk). Each round sends the same number of fresh
messages (distinct keys, keep-alive sessions, a few client threads) to each, alternating
which goes first; the script prints the median throughput of each and their ratio.

    .venv/bin/python benchmarks/bench_provider_log.py [--rounds 5] [--messages 400] [--threads 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import requests
from _quick import pick

from fake_providers import ProviderProcess


def _client(provider: ProviderProcess, keys: list[str], failures: list[str]) -> None:
    with requests.Session() as session:
        headers = provider.auth_headers()
        for key in keys:
            body = {
                "destination": "acct_1",
                "run_id": "run-bench",
                "delivery_id": key,
                "body": "benchmark message",
                "recognizer": "ch-000000000000",
            }
            response = session.post(
                f"{provider.url}/v1/messages",
                json=body,
                headers={**headers, "Idempotency-Key": key},
                timeout=30,
            )
            if response.status_code != 200:
                failures.append(f"{response.status_code} {response.text[:100]}")


def one_round(provider: ProviderProcess, messages: int, threads: int) -> float:
    """Send ``messages`` fresh messages from ``threads`` clients; return accepted per second."""
    provider.admin.reset()
    keys = [uuid.uuid4().hex for _ in range(messages)]
    shares = [keys[i::threads] for i in range(threads)]
    failures: list[str] = []
    workers = [
        threading.Thread(target=_client, args=(provider, share, failures)) for share in shares
    ]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"benchmark requests failed: {failures[:3]}")
    accepted = provider.admin.count(outcome="fresh")
    if accepted != messages:
        raise SystemExit(f"expected {messages} accepted effects, the log has {accepted}")
    return accepted / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=pick(5, 1))
    parser.add_argument("--messages", type=int, default=pick(400, 40))
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-provider-log-") as tmp:
        durable = ProviderProcess.start(log_path=Path(tmp) / "durable.sqlite")
        volatile = ProviderProcess.start(log_path=Path(tmp) / "volatile.sqlite", durable=False)
        try:
            one_round(durable, 50, args.threads)  # warm both up (imports, first connections)
            one_round(volatile, 50, args.threads)
            on: list[float] = []
            off: list[float] = []
            for n in range(args.rounds):
                order = [(durable, on), (volatile, off)]
                for provider, results in order if n % 2 == 0 else reversed(order):
                    results.append(one_round(provider, args.messages, args.threads))
        finally:
            durable.stop()
            volatile.stop()
    median_on, median_off = statistics.median(on), statistics.median(off)
    print(f"rounds={args.rounds} messages/round={args.messages} client threads={args.threads}")
    print(f"durable log (WAL, synchronous=NORMAL): median {median_on:8.1f} accepted effects/s")
    print(f"log off (in-memory, benchmark only): median {median_off:8.1f} accepted effects/s")
    print(f"ratio durable / off: {median_on / median_off:.2f}")


if __name__ == "__main__":
    main()
