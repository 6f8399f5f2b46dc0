"""`tidelog consume --group G` without --partition: join the group as a member.

The command shares the topic's partitions with the group's other members
(other `tidelog consume` runs, Python consumers, HTTP members) and prints
what its partitions hold. Signals only set a flag here: polls are short, so
the loop notices within a fraction of a second, commits what it printed and
leaves the group, handing its partitions over. With --follow each change of
its assignment is said on stderr (stdout stays records only), as a
rebalance moves partitions to or from it.
"""

from __future__ import annotations

import sys

import tidelog

from .output import write_records
from .reading import StopSignals, start_positions

POLL_S = 0.2
FETCH = 500


def consume_as_member(
    log: tidelog.Log,
    topic: str,
    group: str,
    start: str | int | None,
    limit: int | None,
    follow: bool,
    no_commit: bool,
    exclude_producer: str | None,
) -> None:
    printed = 0
    member: tidelog.GroupConsumer | None = None
    dirty = False  # printed records not yet committed (a --from jump alone is not committed)

    def names(tps: list[tuple[str, int]]) -> str:
        return ", ".join(f"{t}/{p}" for t, p in sorted(tps)) or "no partition"

    def say(what: str, tps: list[tuple[str, int]]) -> None:
        if not follow:
            return
        line = f"{group}: {what} {names(tps)}"
        if member is not None:  # (the first assignment arrives before the constructor returns)
            # A revoke is said before the member lets go: what it keeps is the rest.
            held = (
                set(member.assignment()) | set(tps)
                if what == "assigned"
                else set(member.assignment()) - set(tps)
            )
            line += f"; holds {names(list(held))} (generation {member.generation})"
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def assigned(tps: list[tuple[str, int]]) -> None:
        say("assigned", tps)
        # The first assignment arrives inside the constructor; it is applied
        # just after, once `member` exists.
        if start is not None and member is not None:
            positions = start_positions(log, topic, [p for _, p in tps], start)
            for p, position in positions.items():
                member.set_position(topic, p, position)

    def revoked(tps: list[tuple[str, int]]) -> None:
        nonlocal dirty
        say("revoked", tps)
        if dirty and not no_commit and member is not None:
            sys.stdout.flush()
            member.commit()  # what was printed from them, before they move
            dirty = False

    member = log.consumer(group, topics=[topic], on_assign=assigned, on_revoke=revoked)
    stop = StopSignals()
    try:
        with stop.installed():
            if start is not None:
                assigned(member.assignment())
            while not stop.requested:
                want = FETCH if limit is None else min(FETCH, limit - printed)
                polled = member.poll(timeout=POLL_S if follow else 0, max_messages=want)
                messages = polled
                if exclude_producer is not None:  # skipped records count as done
                    messages = [m for m in polled if m.producer != exclude_producer]
                if messages:
                    write_records(sys.stdout, messages)
                    printed += len(messages)
                sys.stdout.flush()
                dirty = dirty or bool(polled)
                if dirty and not no_commit:
                    member.commit()
                    dirty = False
                if limit is not None and printed >= limit:
                    break
                if not follow and not polled:
                    break  # caught up on every partition this member holds
    finally:
        member.close()
