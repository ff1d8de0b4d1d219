"""Jepsen-style failure runs against a local 3-broker cluster (issue 11); bounded in time.

    python -m tools.chaos run [--cluster pybroker|kafka] [--duration 300] [--kills 20] [--bounces 5]
        [--controller-kills 10] [--freeze 1] [--partition-cut 1] [--acks all|1] [--unclean] [--json F]
    python -m tools.chaos control-acks1      # negative control: acks=1 + leader kills must show loss
    python -m tools.chaos control-unclean    # negative control: an unclean election must show loss

Prints a human summary, and the JSON summary to --json (or stdout with --json -). Exit code 0 when the
run found no anomaly and every stall was within its limit (run), or the control found the loss it must
find, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.chaos.controls import acks1_control, unclean_control
from tools.chaos.harness import Options, human_summary, run


def make_cluster(kind: str, workdir: Path, nodes: int, overrides: dict[str, str]) -> Any:
    if kind == "kafka":
        from compat_tests.reference.kafka_cluster import ApacheKafkaCluster

        return ApacheKafkaCluster(workdir, nodes=nodes, overrides=overrides, proxied=True)
    from compat_tests.pybroker_cluster import PyBrokerCluster

    return PyBrokerCluster(workdir, nodes=nodes, overrides=overrides, proxied=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["run", "control-acks1", "control-unclean"], nargs="?", default="run")
    parser.add_argument("--cluster", choices=["pybroker", "kafka"], default="pybroker")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--duration", type=float, default=300, help="seconds of faults (then a cool-down)")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs of partition leaders")
    parser.add_argument("--bounces", type=int, default=5, help="clean SIGTERM restarts of partition leaders")
    parser.add_argument("--controller-kills", type=int, default=10, help="SIGKILLs of the active controller")
    parser.add_argument("--freeze", type=int, default=1, help="SIGSTOPs of a leader past its session timeout")
    parser.add_argument("--partition-cut", type=int, default=1, help="30 s network cuts of a leader")
    parser.add_argument("--acks", choices=["all", "1"], default="all")
    parser.add_argument("--unclean", action="store_true", help="unclean.leader.election.enable=true")
    parser.add_argument("--writers", default="confluent,aiokafka", help="client libraries writing")
    parser.add_argument("--rate", type=float, default=200, help="records/s per writer")
    parser.add_argument("--down", type=float, default=2.0, help="seconds a killed/stopped node stays down")
    parser.add_argument(
        "--freeze-seconds", type=float, default=None, help="how long a leader stays frozen (session timeout + 7 s)"
    )
    parser.add_argument("--cut-seconds", type=float, default=30.0)
    parser.add_argument(
        "--stall-margin", type=float, default=5.0,
        help="a kill/controller kill/freeze/cut may stall its partitions the session timeout + this long",
    )  # fmt: skip
    parser.add_argument("--bounce-stall-limit", type=float, default=3.0, help="stall limit of a clean bounce")
    parser.add_argument("--no-probe", action="store_true", help="no write straight to a deposed leader")
    parser.add_argument(
        "--by-chance", action="store_true",
        help="control-acks1: kill the leader without first freezing its followers (loss only by chance)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--deadline", type=float, default=None, help="no fault starts after this many seconds (3 x duration)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory")
    parser.add_argument("--json", default=None, help="write the JSON summary here ('-': stdout)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker setting")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("tools.chaos").setLevel(logging.INFO)
    for noisy in ("librdkafka", "aiokafka", "kafka", "kazoo"):  # the clients' own reconnect chatter during faults
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    options = Options(
        partitions=args.partitions, duration=args.duration, kills=args.kills, bounces=args.bounces,
        controller_kills=args.controller_kills, freeze=args.freeze, partition_cut=args.partition_cut,
        acks=args.acks, unclean=args.unclean, writers=tuple(args.writers.split(",")), rate=args.rate,
        down_s=args.down, freeze_s=args.freeze_seconds, cut_s=args.cut_seconds, seed=args.seed,
        deadline_s=args.deadline, stall_margin_s=args.stall_margin, bounce_stall_limit_s=args.bounce_stall_limit,
        probe=not args.no_probe,
    )  # fmt: skip
    overrides = dict(pair.split("=", 1) for pair in args.set)
    with tempfile.TemporaryDirectory(prefix="chaos-") as scratch:
        cluster = make_cluster(args.cluster, args.workdir or Path(scratch), args.nodes, overrides)
        cluster.start()
        try:
            if args.command == "run":
                summary = run(cluster, options)
                text, ok = human_summary(summary), summary["ok"]
            elif args.command == "control-acks1":
                summary = acks1_control(cluster, options, lagging_followers=not args.by_chance)
                text, ok = json.dumps(summary, indent=1), summary["loss_detected"]
            else:
                summary = unclean_control(cluster, options)
                text, ok = json.dumps(summary, indent=1), summary["loss_detected"]
        finally:
            cluster.stop()
    print(text, flush=True)
    if args.json == "-":
        print(json.dumps(summary, indent=1))
    elif args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
