"""The limited claimer's plan of its next look, stepped by hand (its thread not started):
the claims are stand-ins, so each case is exact."""

from tasksapp.engine.dispatcher.limited import IDLE_WAIT_SECONDS, LimitedClaimer
from tasksapp.engine.dispatcher.routing import QueueRule, Route, RoutingRules
from tasksapp.engine.dispatcher.sources.base import ClaimOutcome

NOW = 1_000_000.0


def claimer(claim, min_priority: int = 0) -> LimitedClaimer:
    made = LimitedClaimer(
        claim=claim,
        rules=lambda: RoutingRules(),
        min_priority=lambda: min_priority,
        now_ms=lambda: NOW,
        aging_ms=60_000,
    )
    with made.lock:  # held as offer() would, without starting the thread
        for job_id in (1, 2, 3):
            made.ready.add(job_id, Route("api", 0, NOW - 10))
    return made


def test_a_rate_limits_next_start_far_ahead_is_the_next_look():
    def claim(ids, queue):  # one started, the rest held until the next start in 30 s
        return ClaimOutcome(held=ids[1:], retry_at_ms=NOW + 30_000)

    made = claimer(claim)
    made.step()
    assert made.retry_at == NOW + 30_000  # not IDLE_WAIT_SECONDS: no look before then
    assert made.waiting() == 2


def test_a_nudge_while_claiming_is_not_lost():
    def claim(ids, queue):
        made.nudge()  # new jobs or changed rules, while the claim is in the database
        return ClaimOutcome(held=ids, retry_at_ms=NOW + 30_000)

    made = claimer(claim)
    made.step()
    assert made.retry_at is None  # look again at once


def test_jobs_no_claim_can_take_are_looked_at_after_the_idle_wait():
    # Degraded: none of the held jobs is critical, so no claim is made.
    made = claimer(lambda ids, queue: ClaimOutcome(), min_priority=9)
    made.step()
    assert made.retry_at == NOW + IDLE_WAIT_SECONDS * 1000


def test_a_queue_with_more_than_one_claims_candidates_is_claimed_again_at_once():
    made = claimer(lambda ids, queue: ClaimOutcome())  # every candidate claimed
    made.rules = lambda: RoutingRules(queues={"api": QueueRule("api", limited=True, candidates=2)})
    made.step()
    assert made.waiting() == 1
    assert made.retry_at == NOW
