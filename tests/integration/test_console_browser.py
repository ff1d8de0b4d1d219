"""The web console in a real headless browser (Debian's chromium through chromedriver and selenium),
against a real broker process with console.listener set: the pages load, the message browser shows
what a real client produced (text, JSON and hex, headers, offset and timestamp seeks), the group page
shows a lag that moves to 0 as the consumer catches up (the page's own script polling the broker),
and with console.admin=true a topic is created and deleted through the forms.

Screenshots of every page land in this test's tmp directory; their paths are printed (pytest -s).
Chromium missing is a failure, not a skip: CI installs it (scripts/install-deps.sh browser).
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from compat_tests.brokers import PyBroker, free_port
from tests.integration.conftest import against_kafka

MESSAGES = 30
FIRST_COMMIT = 10
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if against_kafka():
        pytest.skip("pybroker's own web console")
    port = free_port()
    b = PyBroker(
        tmp_path_factory.mktemp("console"),
        overrides={
            "console.listener": f"http://127.0.0.1:{port}",
            "console.admin": "true",
            "console.lag.sample.interval.ms": "250",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "3",
        },
    )
    b.console_url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.fail(
            "the web console tests need Debian's chromium and chromium-driver "
            f"(chromium: {chromium}, chromedriver: {driver_path}); install them with "
            "`bash scripts/install-deps.sh browser`"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("console-screenshots")
    print(f"\nweb console screenshots: {d}")
    return d


def screenshot(driver: Any, shots: Path, name: str) -> Path:
    path = shots / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"could not save {path}"
    print(f"screenshot: {path}")
    return path


def text_of(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css).text


def produce(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(MESSAGES):
        p.produce(
            topic,
            key=f"key-{i}".encode(),
            value=json.dumps({"order": i, "item": f"widget-{i}"}).encode(),
            headers=[("source", b"browser-test"), ("seq", str(i).encode())],
            partition=0,
        )
    assert p.flush(30) == 0


def test_console_pages_messages_and_moving_lag(console: Any, browser: Any, shots: Path) -> None:
    from selenium.webdriver.common.by import By

    base = console.console_url
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    group = f"billing-{uuid.uuid4().hex[:6]}"
    produce(console.bootstrap, topic)

    # Cluster overview.
    browser.get(base + "/")
    assert "Cluster" in browser.title
    assert text_of(browser, "#messages-in") == f"{MESSAGES:,}"
    assert int(text_of(browser, "#topic-count")) >= 2  # ours and __consumer_offsets
    screenshot(browser, shots, "01-cluster")

    # Topics list and the topic page: partitions, offsets, configs.
    browser.get(base + "/topics")
    link = browser.find_element(By.LINK_TEXT, topic)
    screenshot(browser, shots, "02-topics")
    link.click()
    wait_for("the topic page", lambda: topic in browser.title)
    assert text_of(browser, "#messages") == f"{MESSAGES}"
    rows = browser.find_elements(By.CSS_SELECTOR, "table")[0].find_elements(By.CSS_SELECTOR, "tbody tr")
    cells = [c.text for c in rows[0].find_elements(By.TAG_NAME, "td")]
    assert cells[:4] == ["0", "0", f"{MESSAGES}", f"{MESSAGES}"]  # partition, start, end, high watermark
    assert "cleanup.policy" in browser.page_source and "DEFAULT_CONFIG" in browser.page_source
    screenshot(browser, shots, "03-topic")

    # The message browser: every produced message, as text, JSON and hex, with headers.
    browser.find_element(By.PARTIAL_LINK_TEXT, "Browse messages").click()
    wait_for("the message browser", lambda: browser.find_elements(By.CSS_SELECTOR, "#messages tr"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#messages tr")
    assert len(rows) == MESSAGES
    for i, row in enumerate(rows):
        cells = row.find_elements(By.TAG_NAME, "td")
        assert cells[0].text == str(i)
        assert cells[2].text == f"key-{i}"
        assert json.loads(cells[3].text) == {"order": i, "item": f"widget-{i}"}
        assert "source: browser-test" in cells[4].text and f"seq: {i}" in cells[4].text
    screenshot(browser, shots, "04-messages-text")

    browser.get(f"{base}/topics/{topic}/messages?partition=0&offset=25&limit=3&format=json")
    rows = browser.find_elements(By.CSS_SELECTOR, "#messages tr")
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == ["25", "26", "27"]
    assert '"item": "widget-25"' in rows[0].find_elements(By.TAG_NAME, "td")[3].text
    screenshot(browser, shots, "05-messages-json")

    browser.get(f"{base}/topics/{topic}/messages?offset=7&limit=1&format=hex")
    value_hex = browser.find_element(By.CSS_SELECTOR, "#messages tr td:nth-child(4)").text
    expected = json.dumps({"order": 7, "item": "widget-7"}).encode()
    assert bytes.fromhex(value_hex.replace(" ", "").replace("\n", "")) == expected

    # Seek by timestamp: everything was produced after this moment minus a minute, so offset 0.
    since = int(time.time() * 1000) - 60_000
    browser.get(f"{base}/topics/{topic}/messages?timestamp={since}&limit=2")
    first = browser.find_element(By.CSS_SELECTOR, "#messages tr td:first-child").text
    assert first == "0"
    browser.get(f"{base}/topics/{topic}/messages?timestamp={int(time.time() * 1000) + 3_600_000}&limit=2")
    assert "Showing 0 message(s)" in browser.page_source

    # A consumer group: commit FIRST_COMMIT, load its page (lag MESSAGES - FIRST_COMMIT), then let
    # the consumer catch up and watch the page's script bring the lag to 0.
    consumer = Consumer(
        {
            "bootstrap.servers": console.bootstrap,
            "group.id": group,
            "client.id": "billing-service",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        consumed = 0
        deadline = time.monotonic() + 60
        while consumed < FIRST_COMMIT and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                consumed += 1
        assert consumed == FIRST_COMMIT
        # Commit exactly offset 10, whatever librdkafka prefetched.
        from confluent_kafka import TopicPartition

        consumer.commit(offsets=[TopicPartition(topic, 0, FIRST_COMMIT)], asynchronous=False)

        browser.get(base + "/groups")
        browser.find_element(By.LINK_TEXT, group).click()
        wait_for("the group page", lambda: group in browser.title)
        lag_before = MESSAGES - FIRST_COMMIT
        wait_for(f"lag {lag_before}", lambda: text_of(browser, "#total-lag") == str(lag_before))
        wait_for(
            "the member and its assignment",
            lambda: "billing-service" in browser.page_source and f"{topic}-0" in browser.page_source,
        )
        wait_for(
            "two lag samples in the chart",
            lambda: (
                int(
                    browser.execute_script(
                        "return document.getElementById('lag-chart').dataset.samples || '0'"
                    )
                )
                >= 2
            ),
        )
        screenshot(browser, shots, "06-group-lagging")

        while consumed < MESSAGES and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                consumed += 1
        assert consumed == MESSAGES
        consumer.commit(asynchronous=False)
        # No reload: the page's script polls the broker and redraws.
        wait_for("lag 0 on the page", lambda: text_of(browser, "#total-lag") == "0")
        offsets = browser.find_elements(By.CSS_SELECTOR, "#offsets-body tr td")
        assert [c.text for c in offsets] == [topic, "0", f"{MESSAGES}", f"{MESSAGES}", "0"]
        wait_for(
            "the chart's last sample at 0",
            lambda: browser.execute_script("return document.getElementById('lag-chart').dataset.last") == "0",
        )
        history = json.loads(urllib.request.urlopen(f"{base}/api/groups/{group}", timeout=15).read())[
            "history"
        ]
        lags = [lag for _, lag in history]
        assert lag_before in lags and lags[-1] == 0, lags  # the chart went from 20 down to 0
        screenshot(browser, shots, "07-group-caught-up")
    finally:
        consumer.close()


def test_console_admin_creates_and_deletes_a_topic(console: Any, browser: Any, shots: Path) -> None:
    from selenium.webdriver.common.by import By

    base = console.console_url
    name = f"made-in-console-{uuid.uuid4().hex[:6]}"
    browser.get(base + "/topics")
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys(name)
    partitions = form.find_element(By.NAME, "partitions")
    partitions.clear()
    partitions.send_keys("3")
    form.find_element(By.NAME, "configs").send_keys("retention.ms=3600000")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for("the new topic's page", lambda: name in browser.title)
    assert f"created topic {name}" in browser.page_source
    assert text_of(browser, "#partitions") == "3"
    assert "DYNAMIC_TOPIC_CONFIG" in browser.page_source and "3600000" in browser.page_source
    screenshot(browser, shots, "08-topic-created")

    browser.get(base + "/topics")
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "tbody tr") if r.text.startswith(name))
    row.find_element(By.CSS_SELECTOR, "button.danger").click()
    wait_for("the confirm dialog", lambda: _alert(browser)).accept()
    wait_for("the deletion notice", lambda: f"deleted topic {name}" in browser.page_source)
    assert not browser.find_elements(By.LINK_TEXT, name)

    # A POST from another origin is refused even with admin on.
    request = urllib.request.Request(
        base + "/topics", data=b"name=evil", headers={"Origin": "http://attacker.example"}, method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=15)
    assert refused.value.code == 403


def _alert(driver: Any) -> Any:
    from selenium.common.exceptions import NoAlertPresentException

    try:
        return driver.switch_to.alert
    except NoAlertPresentException:
        return None
