"""A continuous Python reader of a topic: a confluent-kafka consumer in a group.

The latency mode's "python" variant (resources/bench): what a Python user runs
to read a topic as records arrive, with confluent-kafka (Debian's
python3-confluent-kafka). It subscribes to --topic in --group from the
earliest offset, with the library's default fetch settings, and writes every
value as a line to --out, flushed per record, until SIGTERM. The bounded
ConsumerFactory of factory.py has no continuous mode: it lists watermarks once
and reads the ranges up to them.

    /usr/bin/python3 group.py --brokers 127.0.0.1:9092 --topic T --group G --out lines
"""

import argparse
import signal

from confluent_kafka import Consumer, KafkaException


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    c = Consumer({
        "bootstrap.servers": a.brokers,
        "group.id": a.group,
        "auto.offset.reset": "earliest",
    })
    c.subscribe([a.topic])
    with open(a.out, "ab", buffering=0) as out:
        while not stop:
            m = c.poll(0.1)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            out.write((m.value() or b"") + b"\n")
    c.close()


if __name__ == "__main__":
    main()
