"""The commits of the runs one process carries, made together when they are ready at once (GroupCommit)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio

from orchestrator.cluster.group_commit import GroupCommit
from orchestrator.store.runs import Lease, LeaseLost, RunCommit, StoredEvent
from orchestrator.store.runs_sql import SQLRunStore

INPUT = {"role": "user", "content": "hello"}


def test_commits_ready_at_once_go_in_groups_and_each_caller_gets_its_own_outcome(store: SQLRunStore) -> None:
    runs = 12
    for n in range(runs):
        store.create_run(f"s{n}", f"r{n:02}", INPUT)
    leases = sorted(store.claim("w1", 30, limit=runs), key=lambda lease: lease.request_id)
    stale = leases[5]
    leases[5] = store.commit(stale, RunCommit(events=(StoredEvent("r05", 1, "text_delta", {"seq": 1}),)))
    groups: list[int] = []
    made_together = store.commit_many

    def counted(commits: Sequence[tuple[Lease, RunCommit]]) -> list[Lease | Exception]:
        groups.append(len(commits))
        return made_together(commits)

    store.commit_many = counted  # type: ignore[method-assign]
    outcomes: dict[str, Lease | BaseException] = {}

    async def main() -> None:
        group = GroupCommit(store)

        async def commit(lease: Lease, seq: int, status: str) -> None:
            change = RunCommit(events=(StoredEvent(lease.request_id, seq, "text_delta", {"seq": seq}),), status=status)
            try:
                outcomes[lease.request_id] = await group.commit(lease, change)
            except LeaseLost as lost:
                outcomes[lease.request_id] = lost

        async with trio.open_nursery() as nursery:
            for index, lease in enumerate(leases):
                if index == 5:
                    nursery.start_soon(commit, stale, 2, "running")  # fenced off: its lease moved on
                else:
                    nursery.start_soon(commit, lease, 1, "completed" if index % 2 else "running")

    trio.run(main)
    lost = outcomes.pop("r05")
    assert isinstance(lost, LeaseLost) and lost.request_id == "r05"
    for lease in leases:
        if lease.request_id == "r05":
            continue
        made = outcomes[lease.request_id]
        assert isinstance(made, Lease) and (made.request_id, made.version) == (lease.request_id, lease.version + 1)
        assert [e.seq for e in store.events(lease.request_id)] == [1]
    assert [e.seq for e in store.events("r05")] == [1]
    statuses = {record.request_id: record.status for record in store.runs()}
    assert statuses == {f"r{n:02}": "completed" if n % 2 and n != 5 else "running" for n in range(runs)}
    assert groups and max(groups) > 1  # the commits that came while one was being made went together


def test_a_commit_the_database_refuses_fails_alone_among_commits_made_together(store: SQLRunStore) -> None:
    if store.dialect.name != "postgresql":
        pytest.skip("SQLite stores a NUL in text: only PostgreSQL refuses this commit")
    for n in range(3):
        store.create_run(f"s{n}", f"r{n}", INPUT)
    leases = sorted(store.claim("w1", 30, limit=3), key=lambda lease: lease.request_id)
    outcomes = store.commit_many(
        [
            (lease, RunCommit(events=(StoredEvent(lease.request_id, 1, "no\x00type" if n == 1 else "text", {}),)))
            for n, lease in enumerate(leases)
        ]
    )
    assert isinstance(outcomes[1], Exception) and not isinstance(outcomes[1], Lease)
    assert [(outcome.request_id, outcome.last_seq) for outcome in (outcomes[0], outcomes[2])] == [  # type: ignore[union-attr]
        ("r0", 1),
        ("r2", 1),
    ]
    assert [len(store.events(f"r{n}")) for n in range(3)] == [1, 0, 1]
    assert store.commit(leases[1], RunCommit(events=(StoredEvent("r1", 1, "text", {}),))).last_seq == 1
