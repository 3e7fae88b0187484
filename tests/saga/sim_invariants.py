"""The invariants the simulation checks, and the faults (schedule tags) under which some are
known open or not promised."""

from __future__ import annotations

#: What each invariant means (the names violations carry).
INVARIANTS: dict[str, str] = {
    "run_lost": "every started run is readable",
    "run_unsettled": "every run settles once the faults stop",
    "finished_step_rerun": "a step (or compensation) whose success is in the log never runs again",
    "wrong_row": "a step function runs only for its own step's row and idempotency key",
    "other_definition": "a run is served only by functions of the definition it started under",
    "two_live_workers": "a step never runs in two live workers at once",
    "retry_early": "a retry never begins before the delay its failure scheduled has passed",
    "deadline_passed": "no action's attempt begins (in the log) once its run's deadline passed",
    "sleep_early": "no step after a durable timer begins before the timer's end",
    "wait_skipped": (
        "no step after a wait for a signal begins unless the signal was sent, and it sees the "
        "first signal's data"
    ),
    "recorded_success_untrue": "a step the log says succeeded had its action succeed",
    "status_succeeded": "a SUCCEEDED run had every step's action succeed",
    "status_compensated": "a COMPENSATED run had every finished step's compensation succeed",
    "attempts_charged_unbegun": (
        "attempts are charged once begun: a crash charges at most as many attempts that never "
        "began as the worker runs at once (its concurrency; 1 without); a worker that lives "
        "on after an outage, none"
    ),
    "stopped_run_ran": (
        "no attempt of a run begins once an operator's cancel of it is applied, and no action "
        "once an operator's compensate is"
    ),
    "outcome_dropped": (
        "an attempt that ended in a worker that then lost its store has its outcome recorded "
        "by that worker's next run_due, or its closing (no other worker ran meanwhile), not "
        "recorded as lost; a fenced line if an operator took the run before the commit"
    ),
    "lease_unheld": (
        "an attempt starts only once its worker's lease renewal (its keeper process) holds its "
        "run's lease"
    ),
    "worker_error": "run_due never raises (a worker would stop), but for an outage",
    "harness_error": "the schedule ran to its end (an error escaped the harness otherwise)",
}

#: Invariants the orchestrator is known to break, by the fault (schedule tag) that breaks
#: them: a fault that is still open. A violation of a listed invariant in a schedule with that
#: tag is reported, not failed. Remove an entry once its fix lands (the test then keeps it
#: fixed); for example ``{"batch_crash": frozenset({"attempts_charged_unbegun"})}``.
KNOWN_OPEN: dict[str, frozenset[str]] = {}

#: Invariants the orchestrator does not promise under a fault, by design: reported, not failed.
NOT_GUARANTEED: dict[str, frozenset[str]] = {
    # A step that starves its worker's threads, with no keeper process to renew its lease:
    # the lease lapses while the worker is alive, and another worker runs the step too.
    "keeper_down": frozenset({"two_live_workers"}),
    # An operator breaks a live worker's lease (--force, meant for a dead or hung worker): the
    # run can be claimed at once, while the live worker's attempt may still be under way.
    "forced_lease": frozenset({"two_live_workers"}),
    # The same with async def steps: one that starves its worker's threads blocks the event
    # loop too, so the worker's other async attempts of the group begin only after it, their
    # leases lapsed meanwhile; another worker (or an operator) may have finished or stopped
    # those runs by then.
    "async_keeper_down": frozenset({"two_live_workers", "finished_step_rerun", "stopped_run_ran"}),
    # An operator breaks a live worker's lease while one of its async def steps runs without
    # awaiting (it holds the event loop): the worker's other attempts of the group, begun in
    # the log before the operation, start their functions only after it, on a run an operator
    # has cancelled, compensated or that another worker has finished.
    "async_forced_lease": frozenset({"two_live_workers", "stopped_run_ran", "finished_step_rerun"}),
}

#: What the schedule tags (the keys of KNOWN_OPEN and NOT_GUARANTEED) mean.
TAGS: dict[str, str] = {
    "crash": "workers killed at commit points or after a side effect, one run at a time",
    "batch_crash": (
        "workers killed at commit points or after a side effect, several runs claimed or run "
        "at once (batch or concurrency > 1)"
    ),
    "skew": "workers' clocks up to 1.5 leases apart",
    "slow_step": "steps longer than the lease, renewed meanwhile",
    "starved_lease": (
        "steps longer than the lease that starve their worker's threads (the lease keeper "
        "process renews, where the orchestrator has one)"
    ),
    "keeper_down": "steps that starve their worker's threads while its lease keeper is down",
    "batch_slow": "steps longer than the lease, batch > 1",
    "deploy": "new workers with a step inserted, removed, renamed or moved",
    "failures": "transient and permanent errors of actions and compensations",
    "outage": (
        "the store lost at a worker's commit points inside run_due (the commit lost, or landed "
        "unknown to the worker), the worker going on"
    ),
    "operator": (
        "an operator's retry_now, compensate or cancel of a run, between workers' rounds or "
        "while a step runs (a request to the worker holding the run)"
    ),
    "forced_lease": "operators' operations with force, which break a live worker's lease",
    "async": "some steps' functions are async def (they run on the worker's event loop)",
    "deadline": "runs with a deadline (Saga(timeout=...)) of 2, 8 or 20 s",
    "sleep": "a durable timer (saga.Sleep) among the steps",
    "signal": (
        "a wait for a signal (saga.WaitFor) among the steps, and signals sent to runs (before "
        "or after the wait began, some twice)"
    ),
    "async_keeper_down": "keeper_down, with some steps async def",
    "async_forced_lease": "forced_lease, with some steps async def",
}


#: The history events that say how an attempt ended (``fenced``: its worker's lease was taken
#: before the outcome was committed).
OUTCOME_EVENTS = frozenset({"success", "failure", "hold", "fenced"})
