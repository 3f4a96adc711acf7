"""The dashboard in a real browser (markers ``browser`` and ``hivemind``): headless Chromium loads the page served
against a real swarm on 127.0.0.1 (a bootstrap DHT peer, one member announcing a hostile model name) and two
node folders the node's own writers made (one of them named like markup), and the test reads what the page
shows: the member's row, the six plots with a line per node, the peer tables with the mute, every hostile
name as text. It also takes a screenshot; with ``FTIS_DASHBOARD_SCREENSHOT=PATH`` it is kept there.

Run: python -m pytest tests/test_dashboard_browser.py -q   (about 15 s; skipped without chromium unless
FTIS_REQUIRE_BROWSER=1)
"""

import json
import os
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator

import pytest
from helpers.browser import dump_dom, require_browser, screenshot
from helpers.metrics_fakes import PEER_A, write_node_folder
from helpers.swarm import TOKENIZER, make_batch

from ftis.node.dashboard.charts import CHARTS
from ftis.node.dashboard.run import DashboardRequest, open_dashboard

pytestmark = [pytest.mark.browser, pytest.mark.hivemind]

RUN = "dashboard-test"
HOSTILE = "<img src=x onerror=alert(1)>"
LOOPBACK = "/ip4/127.0.0.1/tcp/0"


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """The dashboard's address, served on a real swarm with one member, and that member's peer id."""
    require_browser()  # before starting any peer
    from hivemind.utils import get_dht_time

    from ftis.node.config import SwarmConfig
    from ftis.node.swarm.dht.transport import HivemindTransport, start_dht

    folder = tmp_path_factory.mktemp("dashboard")
    settings = dict(run_id=RUN, host_maddrs=[LOOPBACK], announce_interval_s=1.0, announcement_ttl_s=60.0)
    bootstrap, _ = start_dht(SwarmConfig(**settings), folder / "bootstrap.key", announce=False)
    transport = dashboard = None
    try:
        maddr = str(bootstrap.get_visible_maddrs()[0])
        transport = HivemindTransport(SwarmConfig(**settings, initial_peers=[maddr]), TOKENIZER)
        transport.publish(make_batch(transport.peer_id, 0, get_dht_time(), run_id=RUN, model=HOSTILE,
                                     adapter="lora", policy_version=7))
        nodes = [write_node_folder(folder / "small", rounds=40, muted=transport.peer_id),
                 write_node_folder(folder / HOSTILE, rounds=25)]
        client = SwarmConfig(run_id=RUN, initial_peers=[maddr], client_mode=True, host_maddrs=[LOOPBACK])
        dashboard = open_dashboard(DashboardRequest(swarm=client, nodes=nodes, port=0, refresh_s=1.0))
        deadline = time.monotonic() + 60
        while transport.peer_id not in _member_ids(dashboard.url):
            assert time.monotonic() < deadline, "the dashboard never read the member from the DHT"
            time.sleep(0.2)
        yield dashboard.url, transport.peer_id
    finally:
        if dashboard is not None:
            dashboard.close()
        if transport is not None:
            transport.close()
        bootstrap.shutdown()


def _member_ids(url: str) -> set[str]:
    with urllib.request.urlopen(url + "api/members", timeout=10) as response:
        return {member["peer_id"] for member in json.loads(response.read())["members"]}


def test_the_page_shows_the_members_the_plots_and_the_peer_scores_with_hostile_names_as_text(page):
    url, member = page
    dom = dump_dom(url)
    assert 'data-state="shown"' in dom, dom[:2000]  # the script ran and drew what the endpoints gave
    assert re.search(rf'<tr class="member" data-peer-id="{member}">', dom)
    assert "<td>LoRA</td>" in dom and '<td class="number">7</td>' in dom  # its adapter, its policy version
    assert re.search(r'<td class="id" title="">(\?|private|direct)</td>', dom)  # how it is reached (loopback)
    assert dom.count('<figure class="chart">') == len(CHARTS)
    lines = sum(len(chart.lines) for chart in CHARTS)
    assert dom.count('<polyline class="series"') == 2 * lines  # every line of both nodes has rounds
    assert re.search(r'<div class="node" data-node="small">', dom)
    assert re.search(rf'<tr class="peer muted" data-peer-id="{member}">', dom)  # small mutes the member
    assert f'data-peer-id="{PEER_A}"' in dom
    # What peers and folders can name is text: escaped in the document, never an element.
    escaped = "&lt;img src=x onerror=alert(1)&gt;"
    assert dom.count(escaped) >= 4  # the member's model, small's peer table, the hostile folder's legend and title
    assert "<img" not in dom
    assert "cannot reach" not in dom


def test_a_screenshot_of_the_page(page, tmp_path):
    url, _ = page
    shot = screenshot(url, tmp_path / "dashboard.png")
    assert shot.stat().st_size > 20_000  # drawn, not a blank page
    keep = os.environ.get("FTIS_DASHBOARD_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
