"""Reads a topic as planned (partition, low, high) ranges on a thread pool.

This is the approach kafka_batched_ranges comes from, as a user would write it
in Python with confluent-kafka: list the partitions' watermarks, cut every
partition into ranges of at most --range-records offsets, and read the ranges on
a pool of --threads threads. With --cache each thread keeps one consumer and
re-assigns it to the next range (a ConsumerFactory with one cached consumer per
thread); without it every range gets a new consumer, closed after the range.

It prints the records and value bytes read and exits non-zero when they differ
from what the watermarks listed. Run by resources/bench (variants "python
cached" and "python no cache"); needs Debian's python3-confluent-kafka:

    /usr/bin/python3 factory.py --brokers 127.0.0.1:9092 --topic T --cache
"""

import argparse
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Consumer, KafkaException, TopicPartition


def consumer_config(brokers):
    return {
        "bootstrap.servers": brokers,
        "group.id": "kbr-bench-factory",  # required by the client; never joined (assign only)
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
    }


class ConsumerFactory:
    """Hands out consumers: one cached per thread, or a new one per call."""

    def __init__(self, brokers, cache):
        self.brokers = brokers
        self.cache = cache
        self.local = threading.local()
        self.lock = threading.Lock()
        self.all = []  # the cached consumers, closed at the end

    def get(self):
        if not self.cache:
            return Consumer(consumer_config(self.brokers))
        c = getattr(self.local, "consumer", None)
        if c is None:
            c = Consumer(consumer_config(self.brokers))
            self.local.consumer = c
            with self.lock:
                self.all.append(c)
        return c

    def put(self, c):
        if not self.cache:
            c.close()

    def close(self):
        for c in self.all:
            c.close()


def read_range(factory, topic, partition, low, high):
    """Reads offsets [low, high) of topic/partition; returns (records, bytes)."""
    c = factory.get()
    try:
        c.assign([TopicPartition(topic, partition, low)])
        n = size = 0
        pos = low
        while pos < high:
            # At most what the range still holds: consume returns once it has
            # that many, rather than waiting out its timeout for more.
            for m in c.consume(num_messages=min(10000, high - pos), timeout=1.0):
                if m.error():
                    raise KafkaException(m.error())
                off = m.offset()
                if off >= high:
                    pos = high
                    break
                n += 1
                size += len(m.value() or b"")
                pos = off + 1
        c.unassign()
        return n, size
    finally:
        factory.put(c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--range-records", type=int, default=10000)
    ap.add_argument("--cache", action="store_true")
    a = ap.parse_args()

    lister = Consumer(consumer_config(a.brokers))
    md = lister.list_topics(a.topic, timeout=30)
    parts = sorted(md.topics[a.topic].partitions)
    ranges, want = [], 0
    for p in parts:
        low, high = lister.get_watermark_offsets(TopicPartition(a.topic, p), timeout=30)
        want += high - low
        for s in range(low, high, a.range_records):
            ranges.append((p, s, min(s + a.range_records, high)))
    lister.close()
    # Interleave partitions, as the input's planner does: range i of every partition before i+1.
    ranges.sort(key=lambda r: (r[1] // a.range_records, r[0]))

    factory = ConsumerFactory(a.brokers, a.cache)
    n = size = 0
    with ThreadPoolExecutor(max_workers=a.threads) as pool:
        for rn, rs in pool.map(lambda r: read_range(factory, a.topic, *r), ranges):
            n += rn
            size += rs
    factory.close()
    print(f"read {n} records, {size} bytes in {len(ranges)} ranges")
    if n != want:
        print(f"read {n} records, the watermarks listed {want}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
