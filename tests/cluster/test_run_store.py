"""The run store's contract, one suite for every implementation (SQLite here; PostgreSQL where a
throwaway server can be started)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence

import pytest

from orchestrator.errors import SessionBusy
from orchestrator.messages import AssistantMessage, Message, UserMessage
from orchestrator.store.errors import SessionOwned, StoreError
from orchestrator.store.fork import ForkRefused
from orchestrator.store.runs import LeaseLost, NewInboxItem, RunCommit, RunStore, StoredEvent, UnknownRunRow

INPUT = {"role": "user", "content": "hello"}


def event(request_id: str, seq: int, kind: str = "text_delta") -> StoredEvent:
    return StoredEvent(request_id, seq, kind, {"type": kind, "seq": seq})


def test_one_active_run_per_session_and_unique_request_ids(store: RunStore) -> None:
    created = store.create_run("s1", "r1", INPUT)
    assert (created.status, created.version, created.last_seq, created.input) == ("queued", 0, 0, INPUT)
    with pytest.raises(SessionBusy):
        store.create_run("s1", "r2", INPUT)
    with pytest.raises(StoreError):
        store.create_run("s2", "r1", INPUT)
    store.create_run("s2", "r3", INPUT)
    assert [r.request_id for r in store.runs(active=True)] == ["r1", "r3"]


def test_a_claim_leases_each_runnable_run_once(store: RunStore) -> None:
    for n in range(3):
        store.create_run(f"s{n}", f"r{n}", INPUT)
    first = store.claim("w1", 30, limit=2)
    second = store.claim("w2", 30, limit=5)
    assert [lease.request_id for lease in first] + [lease.request_id for lease in second] == ["r0", "r1", "r2"]
    assert store.claim("w3", 30, limit=5) == []
    assert store.run("r0").status == "running"  # type: ignore[union-attr]


def test_claims_from_many_threads_never_share_a_run(store: RunStore) -> None:
    for n in range(30):
        store.create_run(f"s{n}", f"r{n}", INPUT)
    taken: list[str] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        while leases := store.claim(name, 30, limit=2):
            with lock:
                taken.extend(lease.request_id for lease in leases)

    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(taken) == sorted(f"r{n}" for n in range(30))


def test_commits_are_fenced_by_the_lease(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    [lease] = store.claim("w1", 30)
    lease = store.commit(
        lease,
        RunCommit(messages=(UserMessage("hello"),), events=(event("r1", 1), event("r1", 2)), checkpoint={"n": 1}),
    )
    assert [e.seq for e in store.events("r1")] == [1, 2]
    assert store.run("r1").checkpoint == {"n": 1}  # type: ignore[union-attr]
    with pytest.raises(StoreError):
        store.commit(lease, RunCommit(events=(event("r1", 4),)))
    stale = lease
    lease = store.commit(lease, RunCommit(events=(event("r1", 3),)))
    with pytest.raises(LeaseLost):
        store.commit(stale, RunCommit(events=(event("r1", 4),)))
    assert [e.seq for e in store.events("r1", after=1)] == [2, 3]


def test_a_stale_commit_whose_events_follow_its_own_lease_writes_nothing(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    [lease] = store.claim("w1", 30)
    store.commit(lease, RunCommit(messages=(UserMessage("hello"),), events=(event("r1", 1),), checkpoint={"n": 1}))
    # The stale lease's next event (seq 1) follows its own last one: only the row says the version moved on.
    with pytest.raises(LeaseLost) as lost:
        store.commit(lease, RunCommit(messages=(AssistantMessage("late"),), events=(event("r1", 1),), checkpoint={}))
    assert "version" in str(lost.value)
    assert [e.seq for e in store.events("r1")] == [1]
    assert store.history("s1") == [UserMessage("hello")]
    assert store.run("r1").checkpoint == {"n": 1}  # type: ignore[union-attr]


def test_an_expired_lease_is_taken_over_and_the_old_holder_cannot_write(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    [old] = store.claim("w1", 0.05)
    time.sleep(0.1)
    [new] = store.claim("w2", 30)
    assert new.token != old.token
    with pytest.raises(LeaseLost) as lost:
        store.commit(old, RunCommit(messages=(AssistantMessage("late"),)))
    assert "w2" in str(lost.value)
    with pytest.raises(LeaseLost):
        store.renew(old, 30)
    store.renew(new, 30)


def test_posting_to_a_parked_run_queues_it_and_idempotency_keys_dedupe(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    [lease] = store.claim("w1", 30)
    store.commit(lease, RunCommit(events=(event("r1", 1, "ask_user"),), status="parked"))
    assert store.run("r1").status == "parked"  # type: ignore[union-attr]
    assert store.claim("w2", 30) == []
    item, created = store.post(NewInboxItem("s1", "r1", "ask_user_response", {"answer": "a"}, "key-1"))
    again, created_again = store.post(NewInboxItem("s1", "r1", "ask_user_response", {"answer": "a"}, "key-1"))
    assert (created, created_again, again.id) == (True, False, item.id)
    assert store.run("r1").status == "queued"  # type: ignore[union-attr]
    [resumed] = store.claim("w2", 30)
    assert [i.id for i in store.inbox("r1")] == [item.id]
    store.commit(resumed, RunCommit(consumed=(item.id,)))
    assert store.inbox("r1") == []
    with pytest.raises(UnknownRunRow):
        store.post(NewInboxItem("s1", "nope", "x", {}))


def test_parking_with_an_answer_already_waiting_queues_at_once(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    [lease] = store.claim("w1", 30)
    store.post(NewInboxItem("s1", "r1", "ask_user_response", {"answer": "a"}))
    store.commit(lease, RunCommit(status="parked"))
    assert store.run("r1").status == "queued"  # type: ignore[union-attr]


def test_cancel_ends_an_unheld_run_and_flags_a_running_one(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    ended = store.cancel("r1", lambda seq: event("r1", seq, "run_cancelled"))
    assert ended.status == "cancelled"
    assert [(e.seq, e.type) for e in store.events("r1")] == [(1, "run_cancelled")]
    store.create_run("s1", "r2", INPUT)
    [lease] = store.claim("w1", 30)
    flagged = store.cancel("r2", lambda seq: event("r2", seq, "run_cancelled"))
    assert flagged.status == "running" and flagged.cancel_requested
    assert store.renew(lease, 30).cancel_requested
    with pytest.raises(StoreError):
        store.post(NewInboxItem("s1", "r1", "x", {}))


def test_final_runs_are_pruned_with_their_events(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    [lease] = store.claim("w1", 30)
    store.commit(lease, RunCommit(events=(event("r1", 1, "run_completed"),), status="completed"))
    store.create_run("s1", "r2", INPUT)
    assert store.prune(time.time() + 1) == 1
    assert store.run("r1") is None and store.events("r1") == []
    assert store.run("r2") is not None


def test_a_heartbeat_may_overlap_the_holders_own_commits(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    [lease] = store.claim("w1", 30)
    moved = store.commit(lease, RunCommit(events=(event("r1", 1),)))
    renewed = store.renew(lease, 60)  # read before the commit moved the version
    assert renewed.expires > lease.expires
    store.commit(moved, RunCommit(events=(event("r1", 2),)))
    with pytest.raises(LeaseLost):
        store.commit(lease, RunCommit(events=(event("r1", 3),)))


def test_a_parked_run_is_claimed_once_its_wake_at_has_passed_and_not_before(store: RunStore) -> None:
    for name in ("r1", "r2", "r3"):
        store.create_run(f"s-{name}", name, INPUT)
    leases = {lease.request_id: lease for lease in store.claim("w1", 30, limit=3)}
    assert store.next_wake() is None
    store.commit(leases["r1"], RunCommit(status="parked", wake_at=time.time() + 3600))  # expires in an hour
    store.commit(leases["r2"], RunCommit(status="parked"))  # waits without expiry
    store.commit(leases["r3"], RunCommit(status="parked", wake_at=time.time() + 0.3))
    wake_in = store.next_wake()
    assert wake_in is not None and wake_in <= 0.31, wake_in  # the earliest parked run, on the store's clock (to a few ms)
    assert store.claim("w2", 30, limit=5) == []  # none has passed yet
    time.sleep(max(0.0, wake_in) + 0.1)
    (woken,) = store.claim("w2", 30, limit=5)
    assert woken.request_id == "r3" and store.run("r3").status == "running"  # type: ignore[union-attr]
    wake_in = store.next_wake()
    assert wake_in is not None and 3500 < wake_in <= 3600, wake_in
    store.commit(woken, RunCommit(status="running"))  # a running run has no wake_at: it is not claimed
    assert store.claim("w3", 30, limit=5) == []
    assert store.run("r2").status == "parked"  # type: ignore[union-attr]


def test_a_commit_stores_the_fingerprint_it_carries_and_keeps_it_otherwise(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    assert store.run("r1").fingerprint is None  # type: ignore[union-attr]
    (lease,) = store.claim("w1", 30.0)
    lease = store.commit(lease, RunCommit(fingerprint='{"digest": "a", "summary": {}}'))
    lease = store.commit(lease, RunCommit(events=(event("r1", 1),)))
    assert store.run("r1").fingerprint == '{"digest": "a", "summary": {}}'  # type: ignore[union-attr]
    store.commit(lease, RunCommit(status="parked", fingerprint='{"digest": "b", "summary": {}}'))
    parked = store.run("r1")
    assert parked is not None and parked.status == "parked" and parked.fingerprint == '{"digest": "b", "summary": {}}'
    assert [row.fingerprint for row in store.runs("s1")] == ['{"digest": "b", "summary": {}}']


def test_the_leases_of_gone_carriers_end_at_once_and_fence_them_off(store: RunStore) -> None:
    for n in range(2):
        store.create_run(f"s{n}", f"r{n}", INPUT)
    [gone] = store.claim("gone", 600, limit=1)
    [alive] = store.claim("alive", 600, limit=1)
    assert store.claim("w3", 600, limit=5) == []
    assert store.expire_leases(["gone", "never-held-one"]) == [gone.request_id]  # type: ignore[attr-defined]
    assert store.expire_leases([]) == []  # type: ignore[attr-defined]
    [taken] = store.claim("w3", 600, limit=5)
    assert taken.request_id == gone.request_id
    with pytest.raises(LeaseLost):
        store.commit(gone, RunCommit(events=(event(gone.request_id, 1),)))
    store.commit(alive, RunCommit(events=(event(alive.request_id, 1),)))


def test_claim_runs_returns_each_run_with_its_row_and_history_and_the_next_wake(store: RunStore) -> None:
    store.create_run("s1", "r1", {"role": "user", "content": "hi"})
    (lease,) = store.claim("w0", 30.0)
    store.commit(lease, RunCommit(messages=(UserMessage("hi"), AssistantMessage("hello")), status="completed"))
    store.create_run("s1", "r2", {"role": "user", "content": "again"})
    store.create_run("s2", "r3", {"role": "user", "content": "other"})
    claim = store.claim_runs("w1", 30.0, 5)
    assert sorted(c.lease.request_id for c in claim.runs) == ["r2", "r3"]
    by_id = {c.lease.request_id: c for c in claim.runs}
    assert by_id["r2"].record.status == "running" and by_id["r2"].record.lease_owner == "w1"
    assert [m.role for m in by_id["r2"].history] == ["user", "assistant"]
    assert by_id["r3"].history == ()
    for taken in claim.runs:  # each lease is its row's, after the claim: it fences the run's next commit
        assert taken.lease.session_id == taken.record.session_id
        assert (taken.lease.version, taken.lease.last_seq) == (taken.record.version, taken.record.last_seq)
        assert taken.lease.expires == taken.record.lease_expires
        store.commit(taken.lease, RunCommit(status="completed"))
    assert claim.wake_in is None  # fewer than asked, and no parked run waits for a time
    assert store.claim_runs("w1", 30.0, 0).runs == ()


def finished(store: RunStore, session_id: str, request_id: str, *messages: UserMessage | AssistantMessage) -> None:
    """A run of ``session_id`` that stored ``messages`` and completed."""
    store.create_run(session_id, request_id, INPUT)
    (lease,) = store.claim("w0", 30.0)
    store.commit(lease, RunCommit(messages=messages, status="completed"))


def test_a_session_is_titled_by_its_first_input_until_a_title_is_set(store: RunStore) -> None:
    long_input = "plan   a\ntrip " + "x" * 80
    finished(store, "s1", "r1", UserMessage(long_input), AssistantMessage("ok"), UserMessage("second"))
    finished(store, "s2", "r2", AssistantMessage("no input yet"))
    store.create_run("s3", "r3", INPUT)  # a session with a run and no message yet
    assert store.titles(["s1", "s2", "s3", "nobody"]) == {"s1": "plan a trip " + "x" * 47 + "…"}
    assert store.set_title("s1", "Trip plans") is True
    assert store.set_title("s3", "Queued one") is True
    assert store.set_title("s1", "Trip plans, again") is True  # a second title replaces the first
    assert store.set_title("nobody", "Nobody's") is False
    assert store.titles(["s1", "s2", "s3", "nobody"]) == {"s1": "Trip plans, again", "s3": "Queued one"}
    assert store.titles([]) == {}
    # Only the titles set: a session titled by its first input has none.
    finished(store, "s4", "r4", UserMessage("first input"))
    assert store.set_titles(["s1", "s2", "s3", "s4", "nobody", "s1"]) == {"s1": "Trip plans, again", "s3": "Queued one"}
    assert store.set_titles([]) == {}


def test_many_sessions_are_titled_in_one_call(store: RunStore) -> None:
    for n in range(1200):
        store.create_run(f"s{n}", f"r{n}", INPUT)
    (lease,) = store.claim("w0", 30.0)
    store.commit(lease, RunCommit(messages=(UserMessage("first one"),), status="completed"))
    store.set_title("s1199", "last one")
    titles = store.titles([f"s{n}" for n in range(1200)])
    assert titles == {lease.session_id: "first one", "s1199": "last one"}


def test_deleting_or_pruning_a_session_deletes_its_title(store: RunStore) -> None:
    finished(store, "s1", "r1", UserMessage("one"))
    finished(store, "s2", "r2", UserMessage("two"))
    store.set_title("s1", "First")
    store.set_title("s2", "Second")
    assert store.delete_session("s1")
    assert store.pruned("r1") is None and store.titles(["s1"]) == {}
    assert store.prune_sessions(time.time() + 1) == ["s2"]
    assert store.titles(["s2"]) == {}
    # The id is free again: a new session under it starts untitled.
    finished(store, "s1", "r3", UserMessage("anew"))
    assert store.titles(["s1", "s2"]) == {"s1": "anew"}


def test_deleting_only_a_session_whose_runs_all_ended_refuses_a_queued_or_parked_one(store: RunStore) -> None:
    finished(store, "s1", "r1", UserMessage("one"))
    store.create_run("s1", "r2", INPUT)
    with pytest.raises(SessionBusy):
        store.delete_session("s1", ended_only=True)
    (lease,) = store.claim("w0", 30.0)
    store.commit(lease, RunCommit(status="parked"))
    with pytest.raises(SessionBusy):
        store.delete_session("s1", ended_only=True)
    assert [run.request_id for run in store.runs("s1")] == ["r1", "r2"] and len(store.history("s1")) == 1
    assert store.delete_session("s1")  # without it, a run nobody holds goes with its session
    assert store.runs("s1") == [] and store.history("s1") == []
    finished(store, "s2", "r3", UserMessage("two"))
    assert store.delete_session("s2", ended_only=True) and store.runs("s2") == []


def two_turns(store: RunStore, session_id: str = "s1") -> None:
    finished(store, session_id, "r1", UserMessage("first"), AssistantMessage("one"))
    finished(store, session_id, "r2", UserMessage("second"), AssistantMessage("two"))


def test_a_session_is_forked_whole_or_up_to_the_end_of_a_turn(store: RunStore) -> None:
    two_turns(store)
    assert store.fork("s1", "whole") == 4
    assert store.fork("s1", "first", turns=1) == 2
    assert store.fork("s1", "both", turns=2) == 4
    assert [m.text for m in store.history("first") if isinstance(m, UserMessage)] == ["first"]
    assert store.history("whole") == store.history("s1") == store.history("both")
    assert store.sessions()[-3:] == ["whole", "first", "both"]
    # The fork is a session of its own: a run in it appends there, the source is unchanged.
    finished(store, "first", "r3", UserMessage("another second"), AssistantMessage("three"))
    assert [m.role for m in store.history("first")] == ["user", "assistant"] * 2
    assert len(store.history("s1")) == 4


def test_a_fork_is_refused_with_its_reason_and_writes_nothing(store: RunStore) -> None:
    two_turns(store)
    finished(store, "taken", "r3", UserMessage("mine"))
    before = store.sessions()
    with pytest.raises(ForkRefused) as unknown:
        store.fork("nobody", "new")
    assert (unknown.value.kind, unknown.value.reason) == ("unknown", "no stored session 'nobody' to fork")
    with pytest.raises(ForkRefused) as exists:
        store.fork("s1", "taken")
    assert (exists.value.kind, exists.value.reason) == ("exists", "the session 'taken' exists already")
    for turns in (0, 3):
        with pytest.raises(ForkRefused) as turn:
            store.fork("s1", "new", turns=turns)
        assert (turn.value.kind, turn.value.reason) == ("turn", "the session 's1' has 2 turns; fork from turn 1 to 2")
    store.create_run("queued-target", "r4", INPUT)  # a session with a run and no message yet exists too
    with pytest.raises(ForkRefused) as queued_target:
        store.fork("s1", "queued-target")
    assert queued_target.value.kind == "exists"
    assert store.sessions() == [*before, "queued-target"]
    assert [len(store.history(s)) for s in ("new", "taken")] == [0, 1]


@pytest.mark.parametrize("status", ["queued", "running", "parked"])
def test_a_session_whose_run_has_not_ended_is_busy_for_a_fork(store: RunStore, status: str) -> None:
    two_turns(store)
    store.create_run("s1", "r3", INPUT)
    if status != "queued":
        (lease,) = store.claim("w1", 30.0)
        store.commit(lease, RunCommit(messages=(UserMessage("third"),), status=status))
    with pytest.raises(SessionBusy):
        store.fork("s1", "new")
    assert store.history("new") == [] and "new" not in store.sessions()


def test_a_fork_keeps_the_set_title_marked_and_is_its_owners(store: RunStore) -> None:
    two_turns(store)
    two_turns_of = store.history("s1")
    store.set_title("s1", "Trip")
    assert store.fork("s1", "mine", owner="alice") == 4
    assert store.fork("s1", "local") == 4
    assert store.titles(["s1", "mine", "local"]) == {"s1": "Trip", "mine": "Trip (fork)", "local": "Trip (fork)"}
    assert store.owners(["s1", "mine", "local"]) == {"s1": "local", "mine": "alice", "local": "local"}
    with pytest.raises(SessionOwned):
        store.create_run("mine", "r3", INPUT, owner="bob")
    store.create_run("mine", "r3", INPUT, owner="alice")
    store.cancel("r3", lambda seq: event("r3", seq, "run_cancelled"))
    finished(store, "untitled-source", "r4", UserMessage("plain"))
    store.fork("untitled-source", "plain-fork")
    assert store.titles(["plain-fork"]) == {"plain-fork": "plain"}  # titled by its first input, as any session
    # Deleting a fork takes its owner and title with it: the id is anybody's again.
    assert store.delete_session("mine")
    assert store.owners(["mine"]) == {} and store.titles(["mine"]) == {}
    assert store.history("s1") == two_turns_of


def test_forks_racing_for_one_target_make_one_session(store: RunStore) -> None:
    two_turns(store)
    outcomes: list[object] = []

    def fork(turns: int) -> None:
        try:
            outcomes.append(store.fork("s1", "raced", turns=turns))
        except ForkRefused as refused:
            outcomes.append(refused.kind)

    threads = [threading.Thread(target=fork, args=(1 + n % 2,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(map(str, outcomes)) == sorted([str(len(store.history("raced")))] + ["exists"] * 5)


def test_claim_runs_returns_each_runs_unconsumed_inbox_items(store: RunStore) -> None:
    store.create_run("s1", "r1", INPUT)
    [lease] = store.claim("w1", 30)
    used, _ = store.post(NewInboxItem("s1", "r1", "steer", {"content": "first"}))
    store.commit(lease, RunCommit(consumed=(used.id,), status="parked"))
    answer, _ = store.post(NewInboxItem("s1", "r1", "ask_user_response", {"tool_call_id": "q1", "answer": "a"}))
    store.create_run("s2", "r2", INPUT)
    claim = store.claim_runs("w2", 30.0, 5)
    by_id = {c.lease.request_id: c for c in claim.runs}
    assert [(i.id, i.payload) for i in by_id["r1"].inbox or ()] == [(answer.id, {"tool_call_id": "q1", "answer": "a"})]
    assert by_id["r2"].inbox == ()


def test_commits_made_together_are_each_fenced_by_their_own_lease(store: RunStore) -> None:
    for n in range(4):
        store.create_run(f"s{n}", f"r{n}", INPUT)
    leases = {lease.request_id: lease for lease in store.claim("w1", 30, limit=4)}
    stale = leases["r1"]
    leases["r1"] = store.commit(stale, RunCommit(events=(event("r1", 1),)))
    [item] = [store.post(NewInboxItem("s3", "r3", "note", {"n": 1}))[0]]
    outcomes = store.commit_many(
        [
            (leases["r2"], RunCommit(messages=(UserMessage("two"),), events=(event("r2", 1),), status="parked")),
            (stale, RunCommit(events=(event("r1", 2),))),  # the lease moved on: fenced off alone
            (leases["r3"], RunCommit(events=(event("r3", 1),), consumed=(item.id, item.id + 100))),  # one is absent
            (leases["r0"], RunCommit(events=(event("r0", 1), event("r0", 2)), status="completed")),
        ]
    )
    made_r2, lost_r1, refused_r3, made_r0 = outcomes
    assert isinstance(lost_r1, LeaseLost) and lost_r1.request_id == "r1"
    assert isinstance(refused_r3, StoreError) and "not there to consume" in str(refused_r3)
    assert (made_r2.version, made_r2.last_seq) == (leases["r2"].version + 1, 1)  # type: ignore[union-attr]
    assert (made_r0.version, made_r0.last_seq) == (leases["r0"].version + 1, 2)  # type: ignore[union-attr]
    assert [(r.request_id, r.status) for r in store.runs()] == [
        ("r0", "completed"),
        ("r1", "running"),
        ("r2", "parked"),
        ("r3", "running"),
    ]
    assert [e.seq for e in store.events("r1")] == [1]
    assert store.events("r3") == [] and [i.id for i in store.inbox("r3")] == [item.id]  # its consume was undone
    assert [e.seq for e in store.events("r0")] == [1, 2]
    assert store.history("s2") == [UserMessage("two")]
    # The runs whose commits failed go on with their own leases.
    store.commit(leases["r3"], RunCommit(events=(event("r3", 1),), consumed=(item.id,)))
    assert store.inbox("r3") == []


AWKWARD = 'é 😀 \u2028 "quoted" back\\slash \\u0000 \x00 \x01\n\t {"a": [1]} lone \ud800 end'
"""Text a store must keep as it was given (a lone surrogate becomes U+FFFD, as it encodes in no UTF)."""


def awkward_body(request_id: str, seq: int) -> dict[str, object]:
    nested = {"list": [seq, 2.5, None, True, {'k\\"': AWKWARD}], "empty": {}}
    return {"text": f"{AWKWARD} {seq}", "nested": nested, "run": request_id}


def kept(value: object) -> object:
    """``value`` as a store gives it back."""
    return json.loads(json.dumps(value).replace("\\ud800", "\\ufffd"))


def said_in(messages: Sequence[Message]) -> list[list[str]]:
    return [[m.role, m.text if isinstance(m, UserMessage) else str(getattr(m, "content", ""))] for m in messages]


def test_commits_made_together_read_back_their_events_and_messages_in_order_and_as_given(store: RunStore) -> None:
    for n in range(3):
        store.create_run(f"s{n}", f"r{n}", INPUT, trace_context={"traceparent": "first"} if n == 2 else None)
    leases = {lease.request_id: lease for lease in store.claim("w1", 30, limit=3)}
    leases["r0"] = store.commit(leases["r0"], RunCommit(messages=(UserMessage("before"),), events=(event("r0", 1),)))
    said = [
        UserMessage(f"{AWKWARD} {n}") if n % 2 else AssistantMessage(content=f"{n} {AWKWARD}") for n in range(30)
    ]
    events = {
        request_id: tuple(
            StoredEvent(request_id, seq, f"kind_{seq % 3}", awkward_body(request_id, seq))
            for seq in range(first, first + 40)
        )
        for request_id, first in (("r0", 2), ("r1", 1), ("r2", 1))
    }
    traced = {"traceparent": "second"}
    outcomes = store.commit_many(
        [
            (leases["r0"], RunCommit(messages=tuple(said), events=events["r0"], trace_context=traced)),
            (leases["r1"], RunCommit(history=(UserMessage("kept"),), messages=tuple(said[:3]), events=events["r1"])),
            (leases["r2"], RunCommit(messages=tuple(said[3:]), events=events["r2"], trace_context=traced)),
        ]
    )
    assert [(outcome.request_id, outcome.last_seq) for outcome in outcomes] == [  # type: ignore[union-attr]
        ("r0", 41),
        ("r1", 40),
        ("r2", 40),
    ]
    for request_id, made in events.items():
        stored = store.events(request_id)
        assert [(e.seq, e.type) for e in stored[-40:]] == [(e.seq, e.type) for e in made]
        assert [e.body for e in stored[-40:]] == [kept(e.body) for e in made]
    assert said_in(store.history("s0")) == kept(said_in([UserMessage("before"), *said]))
    assert said_in(store.history("s1")) == kept(said_in([UserMessage("kept"), *said[:3]]))
    assert said_in(store.history("s2")) == kept(said_in(said[3:]))
    traces = {record.request_id: record.trace_context for record in store.runs()}
    assert traces == {"r0": traced, "r1": None, "r2": {"traceparent": "first"}}  # kept only where there was none
