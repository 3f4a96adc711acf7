"""A node that sees no peer says so (``node/runner/alone.py``): after a while, again every few minutes, with
what its transport counted; and the figures reach the metrics record, the step line and ``status --node``.

Run: python -m pytest tests/test_alone.py -q
"""

from helpers.metrics_fakes import report
from helpers.swarm import FakeClock

from ftis.node.records.display import summary_line
from ftis.node.records.metrics import report_record
from ftis.node.runner.alone import Alone
from ftis.node.swarm.peers.peer_view import PeerView, read_peer_view, write_peer_view
from ftis.node.swarm.status import members_table
from ftis.node.swarm.transport import TransportStats


def test_a_node_without_peers_is_warned_after_a_while_and_again_every_few_minutes():
    clock = FakeClock(1000.0)
    alone = Alone(after_s=60, repeat_s=300, clock=clock)
    stats = TransportStats(announce_failures=3, poll_failures=5)
    assert alone.check(0, stats) is None  # just joined
    clock.now += 61
    warning = alone.check(0, stats)
    assert warning is not None and "no peer seen for 61 s" in warning and "3 announcements and 5 reads" in warning
    clock.now += 100
    assert alone.check(0, stats) is None and alone.seconds() == 161  # not repeated at once
    clock.now += 200
    assert alone.check(0, stats) is not None  # five minutes after the first
    assert alone.check(2, stats) is None and alone.seconds() == 0  # a peer: all is well again
    clock.now += 30
    assert alone.check(0, stats) is None


def test_the_figures_reach_the_record_the_step_line_and_status(tmp_path):
    step = report(transport=TransportStats(announce_failures=2, poll_failures=7, serves_turned_away=4))
    record = report_record(step, alone_s=125.0)
    assert (record["announce_failures_total"], record["poll_failures_total"], record["serves_turned_away_total"],
            record["alone_seconds"]) == (2, 7, 4, 125.0)
    line = summary_line(record)
    assert "DHT failures 2/7" in line and "ALONE for 125 s" in line
    write_peer_view(tmp_path, PeerView(1.0, 3, {}, {}, announce_failures=2, poll_failures=7, alone_seconds=125.0))
    view = read_peer_view(tmp_path)
    table = members_table([], "run", now=2.0, view=view)
    assert "2 failed announcements and 7 failed reads" in table and "NO PEER SEEN FOR 125 s" in table
