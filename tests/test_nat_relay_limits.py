"""What a stranger can push through the bootstrap's relay stays within its bounds, or the bootstrap says plainly that
p2pd's built-in relay answers instead (docs/nat.md, ``benchmarks/relay_limits.py``).

Network namespaces (``helpers.netns``): ``ftis-node bootstrap`` in "public" with small relay bounds (1 MiB and 10 s
per relayed connection, 2 at once per peer), a serving peer in "home" behind the NAT holding a slot on it, and
strangers in "public" (bare ``p2pd``s, no members) dialling the serving peer through its circuit address: one pulls a
4 MiB batch stream by stream, then 4 at once each hold a stream paced at 4 KiB/s. Which relay answers is decided at
``p2pd``'s start; where the configured one does, the test checks its bounds; where the built-in one does, that the
bootstrap warned. Either way the start-up lines name the built-in relay's bounds. Skipped where namespaces cannot be
built, unless FTIS_REQUIRE_NETNS=1 (.ci/run). The two tests after it check the bootstrap's judgement alone.
"""

import pytest
from helpers.netns import require_netns

from benchmarks.relay_limits import BUILTIN_DATA, SETTINGS, held_for, measure_start
from ftis.node.swarm.bootstrap import BUILTIN_RELAY, builtin_slots, builtin_warning
from ftis.node.swarm.reach.p2pd_metrics import RelayCounters
from ftis.node.swarm.transport import Member

RELAY = "QmRelay"
SLACK = 16 * 1024  # bytes a connection may carry over the limit in payload (none measured: its framing is inside)
LATE_S = 3.0  # seconds a connection may outlive the time limit (the relay checks it on a timer; the stranger's pace)


@pytest.mark.hivemind
@pytest.mark.netns
def test_a_stranger_gets_no_more_through_the_relay_than_its_bounds_or_the_bootstrap_says_so():
    require_netns()
    table = SETTINGS["small"][0]
    limit, seconds, circuits = table["relay_data_limit_bytes"], table["relay_time_limit_s"], table["relay_max_circuits"]
    start = measure_start("small", [], quick=True)
    report = "\n".join([*start.relay_lines, *start.said, repr(start.streams), repr(start.held), repr(start.counters)])

    assert start.slot, report
    assert any(BUILTIN_RELAY in line for line in start.relay_lines), report  # said at start-up, whichever answers
    assert start.pulled == start.length, report  # the batch came whole, over as many connections as it took
    per = start.per_connection
    warned = [line for line in start.said if line.startswith("WARNING: p2pd's built-in relay")]
    if start.counters["slots_given"] == 0:  # the built-in relay holds the slot: its bounds, and the bootstrap says so
        assert warned, report
        assert max(per) <= BUILTIN_DATA, report
        return
    assert not warned, report
    # (a) each relayed connection was reset near the configured limit, none carried more
    assert len(per) >= start.length // limit, report
    assert max(per) <= limit + SLACK and min(per[:-1]) > limit // 2, report
    # (b) at most relay_max_circuits relayed connections to one peer at once; the other strangers were refused
    assert start.held["most_at_once"] == circuits, report
    assert sum(s["first_s"] is None for s in start.held["streams"]) == len(start.held["streams"]) - circuits, report
    # (c) each was reset by the time limit, well before the data limit (4 KiB/s)
    assert not any(s["open_at_end"] for s in start.held["streams"]), report
    assert all(seconds - LATE_S <= span <= seconds + LATE_S for span in held_for(start.held)), report
    # (d) the bootstrap's counters saw the slot, the refusals and the bytes
    assert start.counters["refusals"] >= 2 and start.counters["relayed_bytes"] >= start.length, report


def _member(peer_id: str, relays: tuple[str, ...] = ()) -> Member:
    return Member(peer_id, "m", "a", "t", 0, 0, 0, 0.0, "relayed" if relays else "direct", relays)


def test_slots_announced_on_the_relay_that_its_bounded_service_did_not_give_are_the_built_in_relays():
    members = [_member("A", (RELAY,)), _member("B", ("QmOther", RELAY)), _member("C", ("QmOther",)), _member("D")]
    assert builtin_slots(RELAY, members, RelayCounters(slots_given=0)) == 2  # A and B hold slots here: not given
    assert builtin_slots(RELAY, members, RelayCounters(slots_given=1)) == 0  # the bounded service answers
    assert builtin_slots(RELAY, members, None) == 0  # counters unreadable: no judgement
    assert builtin_slots(RELAY, members[2:], RelayCounters()) == 0  # nobody holds a slot here


def test_the_warning_names_the_built_in_bounds_and_what_they_override():
    assert BUILTIN_RELAY in builtin_warning(1, True) and "relay_* settings" in builtin_warning(1, True)
    assert "1 member announces" in builtin_warning(1, True)
    assert "--no-relay" in builtin_warning(3, False) and "3 members announce" in builtin_warning(3, False)
