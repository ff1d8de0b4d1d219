"""pybroker's quota rate (pybroker/quotas/rate.py) against Apache Kafka's own: the same fetch-like
sequence of records, unrecords and throttle waits is run through kafka-clients 4.3.1's Sensor, Rate and
SampledStat (compiled and run here with the reference broker's classpath) and through the Python port,
and every throttle time must agree.  A client quota is measured with this rate, so a difference here is
a difference in how hard a throttled client is held back (it once was: the older sampling pybroker had
copied held a 2 MiB/s consumer to 1.4 MiB/s where Kafka gives 2.0-2.2)."""

from __future__ import annotations

import random
import subprocess

import pytest

from compat_tests.reference.apache_kafka import install
from pybroker.quotas.rate import SampledRate, throttle_time_ms

BOUND = 2_097_152.0
SIZE = 262_222
END_MS = 46_000

# Records SIZE at t (Sensor.record with quota check); a violation is unrecorded (a negative record,
# as ClientQuotaManager.unrecordQuotaSensor does) and the client comes back after the throttle time
# (QuotaUtils.throttleTime); otherwise it comes back after the next gap of the given sequence.
JAVA_DRIVER = """
import org.apache.kafka.common.metrics.*;
import org.apache.kafka.common.metrics.stats.Rate;
import org.apache.kafka.common.utils.Time;
import java.util.*;
import java.util.concurrent.TimeUnit;

public class RateDriver {
  public static void main(String[] args) {
    int samples = Integer.parseInt(args[0]);
    String[] gaps = args[1].split(",");
    Metrics metrics = new Metrics(new MetricConfig(), List.of(), Time.SYSTEM);
    MetricConfig config = new MetricConfig().timeWindow(1, TimeUnit.SECONDS).samples(samples)
        .quota(new Quota(@BOUND@, true));
    Sensor sensor = metrics.sensor("fetch", config);
    Rate rate = new Rate();
    sensor.add(metrics.metricName("byte-rate", "quota"), rate, config);
    long t = 0;
    int next = 0;
    StringBuilder out = new StringBuilder();
    while (t < @END@) {
      try {
        sensor.record(@SIZE@, t, true);
        out.append("0 ");
        t += Long.parseLong(gaps[next++ % gaps.length]);
      } catch (QuotaViolationException e) {
        long ms = Math.round((e.value() - e.bound()) / e.bound() * rate.windowSize(config, t));
        sensor.record(-@SIZE@, t, false);
        out.append(ms).append(' ');
        t += ms + 1;
      }
    }
    System.out.println(out.toString().trim());
  }
}
""".replace("@BOUND@", str(BOUND)).replace("@SIZE@", str(SIZE)).replace("@END@", str(END_MS))


def python_throttles(samples: int, gaps: list[int]) -> list[int]:
    rate = SampledRate(samples, 1000)
    t, nxt, out = 0, 0, []
    while t < END_MS:
        rate.record(SIZE, t)
        ms = throttle_time_ms(rate, BOUND, t, 10**9)
        out.append(ms)
        if ms > 0:
            rate.unrecord(SIZE, t)
            t += ms + 1
        else:
            t += gaps[nxt % len(gaps)]
            nxt += 1
    return out


@pytest.fixture(scope="module")
def java_driver(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    classpath = install()
    work = tmp_path_factory.mktemp("rate-driver")
    (work / "RateDriver.java").write_text(JAVA_DRIVER)
    subprocess.run(["javac", "-cp", classpath, "-d", str(work), str(work / "RateDriver.java")], check=True, timeout=120)
    return ["java", "-cp", f"{classpath}:{work}", "RateDriver"]


@pytest.mark.parametrize("samples", [2, 3, 11])
@pytest.mark.parametrize("gaps_seed", [1, 2])
def test_throttle_times_equal_kafkas_for_the_same_requests(java_driver: list[str], samples: int, gaps_seed: int) -> None:
    rnd = random.Random(gaps_seed)
    # Mostly back-to-back fetches (over the quota), sometimes a pause of up to a few windows (purges).
    gaps = [rnd.choice([0, 1, 2, 5]) if rnd.random() < 0.9 else rnd.choice([17, 130, 999, 1000, 2500]) for _ in range(500)]
    java = subprocess.run(
        [*java_driver, str(samples), ",".join(map(str, gaps))], check=True, capture_output=True, text=True, timeout=120
    ).stdout.split()
    expected = [int(ms) for ms in java]
    got = python_throttles(samples, gaps)
    assert any(expected), "the sequence never crossed the quota: it checks nothing"
    assert got == expected
